"""WebShop, built in: a generated catalogue behind WebShop's text-mode pages, search and reward.

What this implements (facts from the WebShop benchmark; our code)
-----------------------------------------------------------------
In full (pages, the goal's price rule, every reward rule): docs/simulators.md ("WebShop").
* A procedurally generated catalogue: 5 top-level categories (the task types), 4 product types
  each, ~300 products (brand, title, `›` category path, search query, 3 attributes, option groups,
  a displayed price and a hidden true price); goals in WebShop's synthetic-goal style:
      "{instruction} with {k1}: {v1}, and {k2}: {v2}, and price lower than {price_upper:.2f} dollars"
* Pages and transitions of `WebAgentTextEnv` in `observation_mode="text"` (search, results,
  item, sub-pages); observations are the visible text nodes joined by " [SEP] ". Actions
  `search[...]` / `click[...]` are parsed like WebShop's `(.+)\\[(.+)\\]`; anything not
  applicable is a no-op (same page, reward 0, not done), as in WebShop.
* BM25 search (`bm25s`) over the fields WebShop indexes with pyserini/Lucene.
* The reward of WebShop's `goal.py::get_reward`, computed on `click[buy now]`:
      R = r_type * (n_attr_matched + n_opt_matched + [price <= price_upper]) / (|attrs| + |opts| + 1)
  with r_type in {1, 0.5, 0.1, 0} from the title's noun overlap and the query / category match.
  Success = reward 1.0; score = reward.
* A 15-step limit (verl-agent's `env.max_steps=15`; WebShop itself has none), and an expert
  (`expert_action()`) that replans from the current page.
* One fixed shop per `world` (`--env-opt world=N`, default 0): catalogue and goals are a function
  of (world, split, task), never of the run's `--seed` (the real WebShop has one catalogue and one
  goal list), so a warm start shared by every seed (`--bc-seed 0`) knows the store it is
  trained and evaluated in.

What it simplifies
------------------
* spaCy noun tagging -> a closed noun lexicon (our titles are generated); thefuzz -> rapidfuzz's
  token_set_ratio with thefuzz's default preprocessing.
* ASINs are "B0" + 8 digits (a finite vocabulary for the tiny policy); ratings "N.A.", empty
  Reviews pages, a done page with only the thank-you line and the score.
* The price clause uses the target's own hidden price, so the target always reaches 1.0 (WebShop
  draws it from the listed price). Queries longer than 1024 terms are cut (Lucene's clause limit).

Real backend (`make(backend="real", webshop_path=... or $WEBSHOP_PATH)`): WebShop's own
`WebAgentTextEnv` wrapped in the same protocol (snapshot = replay of the actions since reset).

Run: `python -c "from sims import webshop; e = webshop.SPEC.make(); print(e.reset(0)[0])"`;
tests: `python -m pytest -q tests/test_webshop.py`.
"""
from __future__ import annotations

import functools
import os
import re
import string
import sys
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from rapidfuzz import fuzz, utils as fuzz_utils

import envs

# ---------------------------------------------------------------------------------------------
# Catalogue vocabulary (fixed lists: the world only changes assignments, so `vocabulary()` is
# world-independent and the tiny policy's tokenizer is finite)
# ---------------------------------------------------------------------------------------------
BRANDS = ["Lunora", "Velmont", "Carrow", "Ostrel", "Bramwick", "Quessa", "Tavion", "Morrit",
          "Zelani", "Hollin", "Pervane", "Drusk", "Ambrel", "Kestova", "Nimbra", "Sorell"]
# Options shared by categories. Values are lowercase (WebShop lower-cases option values).
COLORS = ["black", "white", "navy blue", "red", "grey", "pink", "green", "beige", "brown", "purple"]
SIZES = ["small", "medium", "large", "x-large"]
# category -> (subcategory, product types); type = (noun phrase, {option name: value pool}, price range)
CATALOG: dict[str, tuple[str, list[tuple[str, dict, tuple[float, float]]]]] = {
    "beauty": ("personal care", [
        ("hair extension", {"color": COLORS[:6], "size": ["16 inch", "18 inch", "22 inch"]}, (12, 60)),
        ("shampoo", {"size": ["8 ounce", "12 ounce", "16 ounce"], "style": ["unscented", "lavender", "citrus"]}, (5, 30)),
        ("lipstick", {"color": ["red", "pink", "brown", "purple", "beige"]}, (4, 25)),
        ("nail polish", {"color": COLORS, "size": ["1 pack", "3 pack", "6 pack"]}, (3, 20))]),
    "fashion": ("clothing", [
        ("t shirt", {"color": COLORS, "size": SIZES}, (8, 35)),
        ("hoodie", {"color": COLORS, "size": SIZES}, (20, 70)),
        ("running shoe", {"color": COLORS[:5], "size": ["7", "8", "9", "10", "11"]}, (30, 120)),
        ("jeans", {"color": ["blue", "black", "grey"], "size": ["28w x 30l", "32w x 32l", "34w x 32l"]}, (25, 90))]),
    "grocery": ("food", [
        ("coffee", {"flavor": ["vanilla", "caramel", "hazelnut", "original"], "size": ["12 ounce", "2 pound"]}, (6, 40)),
        ("green tea", {"flavor": ["mint", "lemon", "jasmine", "original"], "size": ["20 count", "100 count"]}, (4, 25)),
        ("protein bar", {"flavor": ["chocolate", "peanut butter", "vanilla"], "size": ["12 count", "24 count"]}, (10, 45)),
        ("olive oil", {"size": ["16 ounce", "34 ounce"], "style": ["extra virgin", "light"]}, (8, 35))]),
    "electronics": ("accessories", [
        ("headphones", {"color": ["black", "white", "navy blue", "red"], "style": ["over ear", "in ear"]}, (15, 150)),
        ("phone case", {"color": COLORS, "style": ["clear", "matte", "leather"]}, (5, 30)),
        ("charging cable", {"color": ["black", "white"], "size": ["3 feet", "6 feet", "10 feet"]}, (5, 25)),
        ("bluetooth speaker", {"color": ["black", "grey", "navy blue", "green"]}, (20, 120))]),
    "home": ("home decor", [
        ("pillow cover", {"color": COLORS, "size": ["18 x 18 inch", "20 x 20 inch"]}, (6, 30)),
        ("bath towel", {"color": COLORS[:8], "size": ["2 pack", "4 pack", "6 pack"]}, (12, 60)),
        ("desk lamp", {"color": ["black", "white", "grey"], "style": ["modern", "classic"]}, (15, 80)),
        ("storage basket", {"color": ["beige", "grey", "brown", "white"], "size": ["small", "medium", "large"]}, (10, 45))]),
}
ATTRIBUTES = {
    "beauty": ["long lasting", "natural looking", "paraben free", "cruelty free", "easy to use", "travel size"],
    "fashion": ["machine wash", "slim fit", "long sleeve", "quick drying", "button closure", "non slip"],
    "grocery": ["gluten free", "low sugar", "non gmo", "keto friendly", "ready to eat", "individually wrapped"],
    "electronics": ["noise cancelling", "fast charging", "easy install", "high definition", "water resistant", "long battery life"],
    "home": ["easy clean", "space saving", "non slip", "super soft", "machine wash", "wall mounted"],
}
TASK_TYPES = tuple(CATALOG)
# WebShop's normalize_color maps a string to the first COLOR_SET word it contains (substring test),
# so the order matters ("navy blue" -> "blue"). Ours is a short list covering our values.
COLOR_SET = ["blue", "black", "white", "red", "grey", "gray", "pink", "green", "beige", "brown",
             "purple", "navy"]
# Nouns for the spaCy stand-in: every product-type word + brands (PROPN). Our titles are built
# from brand + attribute + type words only, so this lexicon tags them exactly.
NOUNS = {w for c in CATALOG.values() for t in c[1] for w in t[0].split()} | {b.lower() for b in BRANDS}
INSTRUCTION_TEMPLATES = ["i need a {a} {n}", "i am looking for a {a} {n}", "i want to buy a {a} {n}",
                         "find me a {a} {n}"]
PRICE_RANGE = [10.0 * i for i in range(1, 100)]   # 10, 20, ..., 990 (WebShop's PRICE_RANGE)
MAX_HITS, PER_PAGE, MAX_QUERY_TERMS = 50, 10, 1024
SEARCH_PLACEHOLDER = "search[<your query>]"        # verl-agent's admissible-list placeholder
HEADER_BUTTONS = ("back to search", "< prev")
ITEM_BUTTONS = ("description", "features", "reviews", "buy now")


@dataclass
class Product:
    asin: str                        # "B0" + 8 digits, shown upper-case, clicked lower-case
    title: str
    category: str                    # top level: the task type
    product_category: str            # "beauty › personal care › shampoo"
    query: str                       # the product type's noun phrase
    attributes: list[str]
    options: dict[str, list[str]]    # option name -> values (lowercase, unique within a product)
    price_tag: str                   # "$12.5" or "$5.0 to $12.5"
    price: float                     # hidden true price
    description: str
    bullets: list[str]


@dataclass
class Goal:
    asin: str                        # target product (one of possibly several 1.0 purchases)
    instruction: str
    category: str
    query: str
    name: str                        # target title (nouns of it feed title_score)
    product_category: str
    attributes: list[str]
    goal_options: list[str]          # option values the buyer asked for
    price_upper: float
    expert_query: str                # what the expert types into the search bar


# ---------------------------------------------------------------------------------------------
# Generation (deterministic in world; goals in (world, split, task))
# ---------------------------------------------------------------------------------------------
def _title_case(s: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in s.split())


ASIN_POOL_SIZE = 1000


@functools.lru_cache(maxsize=1)
def _asin_pool() -> tuple[str, ...]:
    rng, out, seen = np.random.default_rng(4242), [], set()
    while len(out) < ASIN_POOL_SIZE:
        a = "B0" + "".join(str(d) for d in rng.integers(0, 10, size=8))
        if a not in seen:
            seen.add(a), out.append(a)
    return tuple(out)


def asin_pool() -> list[str]:
    """A fixed, world-independent list of ASINs ("B0" + 8 digits). Catalogues of up to
    ASIN_POOL_SIZE products take their ids from it, so the ids are part of the closed vocabulary
    and the tiny policy's tokenizer can keep each one whole (`SPEC.atomic`): copying a product id
    from the page is then one token, not ten digits in a row."""
    return list(_asin_pool())


def atomic_ids() -> list[str]:
    """`SPEC.atomic`: every pool id as the results page shows it (B0…) and as the admissible
    actions list it (b0…, WebShop's lower-cased clickables), each one tokenizer token."""
    return list(_asin_pool()) + [a.lower() for a in _asin_pool()]


def build_catalogue(world: int = 0, n_products: int = 300) -> list[Product]:
    rng = np.random.default_rng([world, 1234])
    types = [(cat, sub, t) for cat, (sub, ts) in CATALOG.items() for t in ts]
    products, titles, asins = [], set(), set()
    while len(products) < n_products:
        cat, sub, (noun, opt_pool, (lo, hi)) = types[len(products) % len(types)]
        brand = BRANDS[rng.integers(len(BRANDS))]
        attrs = [str(a) for a in rng.choice(ATTRIBUTES[cat], size=3, replace=False)]
        title = f"{brand} {_title_case(attrs[0])} {_title_case(noun)}, {_title_case(attrs[1])}"
        if title in titles:            # unique titles: the expert's title query finds its product
            continue
        asin = "B0" + "".join(str(d) for d in rng.integers(0, 10, size=8))
        if asin in asins:
            continue
        titles.add(title), asins.add(asin)
        # each option group offers 2..all values of its pool
        options = {}
        for name, pool in opt_pool.items():
            k = int(rng.integers(2, len(pool) + 1))
            options[name] = [pool[i] for i in sorted(rng.choice(len(pool), size=k, replace=False))]
        a = round(float(rng.uniform(lo, hi)), 2)
        if rng.random() < 0.35:        # a price range, true price drawn uniformly inside it
            b = round(a * float(rng.uniform(1.2, 2.0)), 1)
            price_tag, price = f"${round(a, 1)} to ${b}", float(rng.uniform(round(a, 1), b))
        else:
            price_tag, price = f"${a}", a
        products.append(Product(
            asin=asin, title=title, category=cat, product_category=f"{cat} › {sub} › {noun}",
            query=noun, attributes=attrs, options=options, price_tag=price_tag, price=price,
            description=f"This {noun} is {attrs[0]}, {attrs[1]} and {attrs[2]}.",
            bullets=[_title_case(attrs[0]), _title_case(attrs[2]), f"Package includes 1 {noun}"]))
    if n_products <= ASIN_POOL_SIZE:   # ids from the fixed pool (own RNG stream: nothing else moves)
        pool = asin_pool()
        for p, j in zip(products, np.random.default_rng([world, 4243]).choice(len(pool), n_products, replace=False)):
            p.asin = pool[int(j)]
    return products


def price_upper_for(price: float, rng: np.random.Generator) -> float:
    """WebShop's price clause rule: first 4 of 10..990 strictly above the price, sample 2, max."""
    cands = [p for p in PRICE_RANGE if p > price][:4]
    if len(cands) < 2:
        return 1e6
    return float(max(rng.choice(cands, size=2, replace=False)))


def instruction_text(core: str, options: list[tuple[str, str]], price_upper: float) -> str:
    s = core
    if options:
        s += " with " + ", and ".join(f"{k}: {v}" for k, v in options)
    if price_upper < 1e6:
        s += f", and price lower than {price_upper:.2f} dollars"
    return s


# ---------------------------------------------------------------------------------------------
# Reward (goal.py::get_reward with our noun and fuzzy-match stand-ins)
# ---------------------------------------------------------------------------------------------
def token_set_ratio(a: str, b: str) -> float:
    # thefuzz 0.19 preprocesses by default (lowercase, non-alphanumerics -> spaces); rapidfuzz not.
    return fuzz.token_set_ratio(a, b, processor=fuzz_utils.default_process)


def normalize_color(s: str) -> str:
    for c in COLOR_SET:
        if c in s:
            return c
    return s


def get_nouns(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w in NOUNS]


def type_reward(p: Product, g: Goal) -> float:
    query_match = p.query == g.query
    pc, gc = p.product_category.split(" › "), g.product_category.split(" › ")
    category_match = len(set(pc) & set(gc)) >= 2
    want = get_nouns(g.name)
    title_score = len(set(get_nouns(p.title)) & set(want)) / len(want) if want else 0.2
    r = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r = 0.5
    if title_score < 0.1:
        r = 0.1
    if title_score == 0.0:
        r = 0.0
    return r


def attribute_matches(p: Product, g: Goal) -> int:
    text = " ".join([p.title.lower(), " ".join(p.bullets).lower(), p.description.lower()])
    n = 0
    for ga in g.attributes:
        if any(token_set_ratio(pa, ga) > 85 for pa in p.attributes) or ga in text:
            n += 1
    return n


def option_matches(selected: list[str], goal_options: list[str]) -> int:
    sel = [normalize_color(o) for o in selected]
    return sum(any(token_set_ratio(s, normalize_color(go)) > 85 for s in sel) for go in goal_options)


def get_reward(p: Product, g: Goal, selected: list[str], price: float | None = None) -> float:
    price = p.price if price is None else price
    n = attribute_matches(p, g) + option_matches(selected, g.goal_options) + float(price <= g.price_upper)
    return type_reward(p, g) * n / (len(g.attributes) + len(g.goal_options) + 1)


def best_options(p: Product, g: Goal) -> dict[str, str] | None:
    """Option choice that satisfies every goal option on product p (None if impossible)."""
    chosen: dict[str, str] = {}
    for go in g.goal_options:
        hit = next(((name, v) for name, vals in p.options.items() for v in vals
                    if name not in chosen and token_set_ratio(normalize_color(v), normalize_color(go)) > 85), None)
        if hit is None:
            return None
        chosen[hit[0]] = hit[1]
    return chosen


# ---------------------------------------------------------------------------------------------
# WebShop's action parse, in linear time
# ---------------------------------------------------------------------------------------------
def parse_action(action: str) -> tuple[str, str | None]:
    """Same result as `re.match(r'(.+)\\[(.+)\\]', action)` (WebShop's parse), without the
    regex's quadratic backtracking on bracket soup: `.` stops at the first newline, the greedy
    first group takes the last '[' that still has a ']' at least two characters later, and the
    greedy second group runs to the last ']' of that line."""
    line = action.split("\n", 1)[0]
    c = line.rfind("]")
    i = line.rfind("[", 1, c - 1) if c >= 3 else -1
    if i < 1:
        return action, None
    return line[:i], line[i + 1:c]


# ---------------------------------------------------------------------------------------------
# The shop: catalogue + BM25 index + goals (shared, read-only, by every env of a (world, knobs))
# ---------------------------------------------------------------------------------------------
def _terms(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class Shop:
    def __init__(self, world: int = 0, n_products: int = 300, n_test: int = 200,
                 products: list[Product] | None = None):
        import bm25s
        self.world, self.n_test = world, n_test
        # `products` lets tests build a hand-made shop (goals then go into `self._goals`)
        self.products = build_catalogue(world, n_products) if products is None else products
        self.by_asin = {p.asin.lower(): p for p in self.products}
        docs = []
        for p in self.products:
            opts = " ".join(f"{k}: {', '.join(v)}" for k, v in p.options.items())
            docs.append(_terms(" ".join([p.title, p.description, p.bullets[0], opts])))
        self.bm25 = bm25s.BM25()
        self.bm25.index(docs, show_progress=False)
        self._cache: dict[str, tuple[str, ...]] = {}
        self._goals: dict[tuple[str, int], Goal] = {}

    def search(self, query: str) -> tuple[str, ...]:
        """Lower-case asins of the top <=50 products with a positive BM25 score, best first
        (ties by catalogue order, so results are deterministic). Cached: queries repeat a lot."""
        terms = _terms(query)[:MAX_QUERY_TERMS]
        key = " ".join(terms)
        if key not in self._cache:
            known = [t for t in terms if t in self.bm25.vocab_dict]
            if not known:
                hits: tuple[str, ...] = ()
            else:
                s = np.asarray(self.bm25.get_scores(known))
                order = np.argsort(-s, kind="stable")[:MAX_HITS]
                hits = tuple(self.products[i].asin.lower() for i in order if s[i] > 0)
            if len(self._cache) > 20000:
                self._cache.clear()
            self._cache[key] = hits
        return self._cache[key]

    def perfect(self, asin: str, g: Goal) -> dict[str, str] | None:
        """Options with which buying `asin` scores 1.0, or None."""
        p = self.by_asin[asin]
        opts = best_options(p, g)
        if opts is None or get_reward(p, g, list(opts.values())) < 1.0:
            return None
        return opts

    def goal(self, split: str, task: int) -> Goal:
        key = (split, task)
        if key not in self._goals:
            if len(self._goals) > 50000:
                self._goals.clear()
            self._goals[key] = self._make_goal(split, task)
        return self._goals[key]

    def _make_goal(self, split: str, task: int) -> Goal:
        rng = np.random.default_rng([self.world, 0 if split == "train" else 1, task])
        for attempt in range(30):
            p = self.products[rng.integers(len(self.products))]
            attrs = [str(a) for a in rng.choice(p.attributes, size=int(rng.integers(1, 3)), replace=False)]
            names = list(p.options)
            k = int(rng.integers(1, len(names) + 1))
            opts = [(n, p.options[n][rng.integers(len(p.options[n]))]) for n in sorted(rng.choice(names, size=k, replace=False))]
            pu = price_upper_for(p.price, rng)
            core = INSTRUCTION_TEMPLATES[rng.integers(len(INSTRUCTION_TEMPLATES))].format(a=" and ".join(attrs), n=p.query)
            g = Goal(asin=p.asin.lower(), instruction=instruction_text(core, opts, pu), category=p.category,
                     query=p.query, name=p.title, product_category=p.product_category, attributes=attrs,
                     goal_options=[v for _, v in opts], price_upper=pu, expert_query=f"{' '.join(attrs)} {p.query}")
            # Keep goals whose natural query (attributes + product type) puts a 1.0 purchase on
            # results page 1; otherwise redraw (the last resort searches the target's title).
            if any(self.perfect(a, g) for a in self.search(g.expert_query)[:PER_PAGE]):
                return g
        g.expert_query = p.title.lower()
        return g


# ---------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------
@dataclass
class _State:
    page: str = "search"             # search | results | item | description | features | reviews | done
    query: str = ""
    hits: tuple = ()                 # lower-case asins of the last search
    page_no: int = 1
    asin: str = ""
    options: dict = field(default_factory=dict)
    steps: int = 0
    done: bool = False
    reward: float = 0.0
    obs: str = ""


_SHOPS: dict[tuple, Shop] = {}


def get_shop(world: int, n_products: int, n_test: int) -> Shop:
    key = (world, n_products, n_test)
    if key not in _SHOPS:
        _SHOPS[key] = Shop(world, n_products, n_test)
    return _SHOPS[key]


class WebShopEnv:
    """One shopper session at a time; pages and reward: docs/simulators.md ("WebShop")."""
    name = "webshop"

    def __init__(self, split: str = "train", seed: int = 0, n_products: int = 300, n_test: int = 200,
                 max_steps: int = 15, shop: Shop | None = None, world: int = 0):
        # `seed` is accepted for the env protocol and deliberately unused: the shop is the world's
        # (module docstring, docs/simulators.md), the episode's randomness is the rollout's sampling
        self.split, self.max_steps = split, max_steps
        self.shop = shop or get_shop(world, n_products, n_test)
        self.task, self.goal = 0, self.shop.goal(split, 0)
        self.s = _State()

    # -- pages --------------------------------------------------------------------------------
    def _header(self) -> list[str]:
        return ["Instruction:", self.goal.instruction, "Back to Search"]

    def _render(self) -> str:
        s, g = self.s, self.goal
        if s.page == "search":
            parts = ["WebShop", "Instruction:", g.instruction, "Search"]
        elif s.page == "results":
            parts = self._header() + [f"Page {s.page_no} (Total results: {len(s.hits)})"]
            parts += (["< Prev"] if s.page_no > 1 else []) + ["Next >"]
            for a in self._page_asins():
                p = self.shop.by_asin[a]
                parts += [p.asin, p.title, p.price_tag]
        elif s.page == "item":
            p = self.shop.by_asin[s.asin]
            parts = self._header() + ["< Prev"]
            for name, vals in p.options.items():
                parts += [name] + vals
            parts += [p.title, f"Price: {p.price_tag}", "Rating: N.A.", "Description", "Features", "Reviews", "Buy Now"]
        elif s.page == "description":
            parts = self._header() + ["< Prev", self.shop.by_asin[s.asin].description]
        elif s.page == "features":
            parts = self._header() + ["< Prev"] + self.shop.by_asin[s.asin].bullets
        elif s.page == "reviews":
            parts = self._header() + ["< Prev"]
        else:  # done
            parts = ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", str(s.reward)]
        return " [SEP] ".join(parts)

    def _page_asins(self) -> tuple[str, ...]:
        k = (self.s.page_no - 1) * PER_PAGE
        return self.s.hits[k:k + PER_PAGE]

    def clickables(self) -> list[str]:
        """WebShop's get_available_actions()['clickables'] for the current page (lower-case)."""
        s = self.s
        if s.page == "search":
            return ["search"]
        if s.page == "results":
            return ["back to search"] + (["< prev"] if s.page_no > 1 else []) + ["next >"] + list(self._page_asins())
        if s.page == "item":
            vals = [v for vs in self.shop.by_asin[s.asin].options.values() for v in vs]
            return list(HEADER_BUTTONS) + list(ITEM_BUTTONS) + vals
        if s.page in ("description", "features", "reviews"):
            return list(HEADER_BUTTONS)
        return []

    def _info(self) -> dict:
        adm = ([SEARCH_PLACEHOLDER] if self.s.page == "search" else []) + [f"click[{c}]" for c in self.clickables()]
        won = self.s.done and self.s.reward >= 1.0
        return {"task": self.goal.instruction, "task_type": self.goal.category, "admissible": adm,
                "won": bool(won), "score": float(self.s.reward)}

    # -- protocol -----------------------------------------------------------------------------
    def reset(self, task: int) -> tuple[str, dict]:
        self.task, self.goal = int(task), self.shop.goal(self.split, int(task))
        self.s = _State()
        self.s.obs = self._render()
        return self.s.obs, self._info()

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        s = self.s
        if s.done:  # after the episode: keep answering the last page; no more reward
            return s.obs, 0.0, True, self._info()
        s.steps += 1
        reward = self._transition(action if isinstance(action, str) else str(action))
        if s.steps >= self.max_steps:
            s.done = True
        s.obs = self._render()
        return s.obs, reward, s.done, self._info()

    def _transition(self, action: str) -> float:
        """Apply one action; a no-op (return 0.0, page unchanged) unless WebShop would act."""
        s = self.s
        name, arg = parse_action(action)
        if arg is None:
            return 0.0
        arg = arg.lower()
        if name == "search" and s.page == "search":
            s.page, s.query, s.hits, s.page_no = "results", arg, self.shop.search(arg), 1
            return 0.0
        if name != "click" or arg == "search" or arg not in self.clickables():
            return 0.0
        if arg == "back to search":
            s.page, s.asin, s.options = "search", "", {}
        elif arg == "next >":
            s.page_no += 1
        elif arg == "< prev":
            if s.page == "results":
                s.page_no -= 1
            elif s.page == "item":
                s.page, s.asin, s.options = "results", "", {}
            else:
                s.page = "item"
        elif s.page == "results":          # a product link
            s.page, s.asin, s.options = "item", arg, {}
        elif arg in ("description", "features", "reviews"):
            s.page = arg
        elif arg == "buy now":
            p = self.shop.by_asin[s.asin]
            s.reward = get_reward(p, self.goal, list(s.options.values()))
            s.page, s.done = "done", True
            return s.reward
        else:                               # an option value on the item page
            for oname, vals in self.shop.by_asin[s.asin].options.items():
                if arg in vals:
                    s.options = {**s.options, oname: arg}
                    break
        return 0.0

    def snapshot(self) -> Any:
        s = self.s  # every field is immutable or copied, so the tuple is an exact, cheap snapshot
        return (self.task, s.page, s.query, s.hits, s.page_no, s.asin, dict(s.options), s.steps,
                s.done, s.reward, s.obs)

    def restore(self, snap: Any) -> None:
        task, *rest = snap
        self.task, self.goal = task, self.shop.goal(self.split, task)
        self.s = _State(*rest[:5], dict(rest[5]), *rest[6:])

    # -- expert -------------------------------------------------------------------------------
    def random_action(self, rng) -> str:
        """A detour for the warm start's ε-noisy demos: on the search page a query of 1-4 random
        words of the instruction (verl-agent's admissible list only has a placeholder there),
        elsewhere a random clickable as the admissible actions list it."""
        if self.s.page == "search":
            words = re.findall(r"[a-z]+", self.goal.instruction.split(" with ")[0].lower())
            return f"search[{' '.join(rng.sample(words, min(len(words), rng.randint(1, 4))))}]"
        cl = self.clickables()
        c = rng.choice(cl) if cl else "back to search"
        return f"click[{c}]"

    def expert_action(self) -> str:
        """Next action of a shopper who knows the reward: buy the first result that can score
        1.0 with the right options. Replans from any page (detours cost at most ~3 steps)."""
        s, g, shop = self.s, self.goal, self.shop
        if s.done:
            return "click[buy now]"
        good = [a for a in s.hits if shop.perfect(a, g)]
        if s.page == "search":
            return f"search[{g.expert_query}]"
        if s.page == "results":
            here = [a for a in self._page_asins() if a in good]
            if here:   # verbatim from the admissible actions (lower case), as verl-agent's agents copy them
                return f"click[{here[0]}]"
            if good:   # a good product on another page of these results
                return "click[next >]" if s.hits.index(good[0]) >= s.page_no * PER_PAGE else "click[< prev]"
            return "click[back to search]"
        if s.page == "item":
            opts = shop.perfect(s.asin, g)
            if opts is None:
                return "click[< prev]" if good else "click[back to search]"
            for name, v in opts.items():
                cur = s.options.get(name)
                if cur is None or token_set_ratio(normalize_color(cur), normalize_color(v)) <= 85:
                    return f"click[{v}]"
            # an extra option in another group never hurts the score, so buy
            return "click[buy now]"
        return "click[< prev]"   # description / features / reviews


# ---------------------------------------------------------------------------------------------
# Real backend: WebShop's own text env (princeton-nlp/WebShop checkout + data + search index)
# ---------------------------------------------------------------------------------------------
REAL_HELP = ("WebShop real backend needs a WebShop checkout: set WEBSHOP_PATH (or webshop_path=) to a clone "
             "of github.com/princeton-nlp/WebShop after running its `./setup.sh -d small` (data + search index, "
             "needs Java for pyserini)")


class RealWebShopEnv:
    """WebShop's `WebAgentTextEnv(observation_mode='text')` in our protocol. Splits follow
    verl-agent: test = goals 0-499, train = 500+. Snapshots replay the actions since reset
    (WebShop's engine has no state copy; its search and prices are deterministic after load)."""
    name = "webshop"

    def __init__(self, split: str = "train", seed: int = 0, webshop_path: str | None = None,
                 max_steps: int = 15, num_products: int | None = 1000, human_goals: bool = False):
        path = webshop_path or os.environ.get("WEBSHOP_PATH")
        if not path or not os.path.isdir(os.path.join(path, "web_agent_site")):
            raise RuntimeError(REAL_HELP + f" (got {path!r})")
        sys.path.insert(0, path)
        try:
            from web_agent_site.envs.web_agent_text_env import WebAgentTextEnv
        except Exception as e:  # missing deps/data surface here; keep the cause visible
            raise RuntimeError(f"{REAL_HELP}; import failed: {e!r}") from e
        self.env = WebAgentTextEnv(observation_mode="text", num_products=num_products, human_goals=human_goals)
        self.split, self.max_steps, self.offset = split, max_steps, (500 if split == "train" else 0)
        self.session, self.actions, self.last = 0, [], None

    def _info(self, won=False, score=0.0) -> dict:
        av = self.env.get_available_actions()
        adm = ([SEARCH_PLACEHOLDER] if av.get("has_search_bar") else []) + [f"click[{c}]" for c in av.get("clickables", [])]
        goal = self.env.server.goals[self.session] if hasattr(self.env, "server") else {}
        return {"task": self.task, "task_type": str(goal.get("category", "webshop")), "admissible": adm,
                "won": bool(won), "score": float(score)}

    def reset(self, task: int) -> tuple[str, dict]:
        self.session, self.actions, self.last = self.offset + int(task), [], None
        obs, _ = self.env.reset(session=self.session)
        parts = obs.split(" [SEP] ")
        self.task = parts[2] if len(parts) > 2 else obs
        return obs, self._info()

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self.last is not None and self.last[2]:
            obs, _, done, info = self.last
            return obs, 0.0, True, info
        self.actions.append(action)
        try:
            obs, reward, done, _ = self.env.step(action)
        except Exception:   # WebShop raises on a few malformed actions; the page is unchanged then
            obs, reward, done = self.env.observation, 0.0, False
        done = bool(done) or len(self.actions) >= self.max_steps
        info = self._info(won=bool(done and reward >= 1.0), score=float(reward or 0.0))
        self.last = (obs, float(reward or 0.0), done, info)
        return self.last

    def snapshot(self) -> Any:
        return (self.session, tuple(self.actions))

    def restore(self, snap: Any) -> None:
        session, actions = snap
        self.reset(session - self.offset)
        for a in actions:
            self.step(a)

    def expert_action(self) -> str:
        """No oracle for real goals: search the instruction, open the first hit, buy (a weak
        heuristic, for smoke tests only)."""
        av = self.env.get_available_actions()
        if av.get("has_search_bar"):
            return f"search[{self.task}]"
        cl = av.get("clickables", [])
        if "buy now" in cl:
            return "click[buy now]"
        asins = [c for c in cl if c not in ("back to search", "< prev", "next >")]
        return f"click[{asins[0]}]" if asins else "click[back to search]"


# ---------------------------------------------------------------------------------------------
# Spec: make, vocabulary, prompts, parse
# ---------------------------------------------------------------------------------------------
def make(split: str = "train", seed: int = 0, backend: str = "builtin", **kw):
    if backend == "builtin":
        return WebShopEnv(split, seed, **kw)
    if backend == "real":
        if "world" in kw:
            raise ValueError("webshop --env-opt world= picks a built-in shop; the real backend has WebShop's own catalogue")
        return RealWebShopEnv(split, seed, **kw)
    raise ValueError(f"webshop backend must be 'builtin' or 'real', got {backend!r}")


def num_tasks(split: str) -> int | None:
    return None if split == "train" else 200


def vocabulary() -> list[str]:
    words = set(BRANDS) | set(NOUNS) | set(COLOR_SET) | set(string.punctuation) | set(string.digits)
    for cat, (sub, types) in CATALOG.items():
        words |= {cat, sub, "›"}
        for noun, opts, _ in types:
            words |= {noun, _title_case(noun)} | set(opts)
            words |= {v for vs in opts.values() for v in vs}
    for attrs in ATTRIBUTES.values():
        words |= {a for a in attrs} | {_title_case(a) for a in attrs}
    words |= set(INSTRUCTION_TEMPLATES)
    words |= {"with and price lower than dollars", "This is and", "Package includes",
              "WebShop Instruction: Search Back to Search Page Total results Next > < Prev",
              "Price: Rating: N.A. Description Features Reviews Buy Now",
              "Thank you for shopping with us! Your score min max",
              "search click back to search prev next description features reviews buy now",
              SEARCH_PLACEHOLDER, "B b", "[SEP]", "task obs act actions"}
    return sorted(words | set(atomic_ids()))


def strip_instruction(obs: str) -> str:
    """verl-agent's observation rewrite: drop everything up to the instruction and quote each
    remaining part: 'Back to Search' [SEP] 'Page 1 (Total results: 50)' [SEP] ..."""
    parts = obs.split(" [SEP] ")
    if len(parts) > 2 and "Instruction:" in parts[:2]:
        parts = parts[parts.index("Instruction:") + 2:]
    return " [SEP] ".join(f"'{p}'" for p in parts)


_WS_HEAD = ("You are an expert autonomous agent operating in the WebShop e\u2011commerce environment.\n"
            "Your task is to: {task}.\n")
_WS_TAIL = ("Your admissible actions of the current situation are: [\n{actions}\n].\n\n"
            "Now it's your turn to take one action for the current step.\n"
            "You should first reason step-by-step about the current situation, then think carefully which "
            "admissible action best advances the shopping goal. This reasoning process MUST be enclosed "
            "within <think> </think> tags.\n"
            "Once you've finished your reasoning, you should choose an admissible action for current step "
            "and present it within <action> </action> tags.")


def chat_prompt(v: envs.PromptInput, history_len: int = 2) -> str:
    """verl-agent's WebShop prompt (with / without history; >13,000 characters falls back)."""
    acts = "\n".join(f"'{a}'," for a in v.admissible)
    obs = strip_instruction(v.obs)
    no_his = _WS_HEAD.format(task=v.task) + f"Your current observation is: {obs}.\n" + _WS_TAIL.format(actions=acts)
    if v.step == 0 or history_len == 0 or not v.history:
        return no_his
    k0 = max(0, len(v.history) - history_len)
    recs = "\n".join(f"[Observation {k + 1}: '{strip_instruction(o)}', Action {k + 1}: '{a}']"
                     for k, (o, a) in enumerate(v.history) if k >= k0)
    p = (_WS_HEAD.format(task=v.task) +
         f"Prior to this step, you have already taken {v.step} step(s). Below are the most recent "
         f"{len(v.history) - k0} observations and the corresponding actions you took: {recs}\n"
         f"You are now at step {v.step + 1} and your current observation is: {obs}.\n" + _WS_TAIL.format(actions=acts))
    return p if len(p) <= 13000 else no_his


def _short(obs: str) -> str:
    parts = obs.split(" [SEP] ")
    if len(parts) > 2 and "Instruction:" in parts[:2]:
        parts = parts[parts.index("Instruction:") + 2:]
    return " [SEP] ".join(parts)


def compact_prompt(v: envs.PromptInput, history_len: int = 2) -> str:
    """envs.compact_prompt on observations without the repeated instruction (it is the task line)."""
    return envs.compact_prompt(replace(v, obs=_short(v.obs), history=[(_short(o), a) for o, a in v.history]),
                               history_len)


SPEC = envs.EnvSpec(
    name="webshop", make=make, splits=("train", "test"), num_tasks=num_tasks, vocabulary=vocabulary,
    chat_prompt=chat_prompt, compact_prompt=compact_prompt, parse=envs.parse_action_tag,
    task_types=TASK_TYPES, atomic=atomic_ids, backend=lambda b: envs.builtin_or_real("webshop", b),
    options={"world": envs.EnvOption(int, 0, lambda v: None if v >= 0 else "must be >= 0",
                                     "which generated shop (catalogue and goals); --seed never changes it")},
    # pages are long, so prompts carry no history; a shorter warm start, stopped at a fixed number of
    # BC steps; R is the benchmark's own score
    defaults={"history_len": 0, "bc_episodes": 200, "bc_steps": 300, "bc_target": 0.0, "reward": "score", "iters": 250})
