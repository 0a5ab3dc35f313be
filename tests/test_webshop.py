"""Built-in WebShop: pages, transitions, reward, bad actions, expert, snapshots, vocabulary.

Run: python -m pytest -q tests/test_webshop.py
"""
import os
import random
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import envs  # noqa: E402
from sims import webshop as W  # noqa: E402

I = "i need a long lasting shampoo with size: 8 ounce, and price lower than 20.00 dollars"


def _product(asin, title, query="shampoo", cat="beauty › personal care › shampoo", attrs=("long lasting", "paraben free", "travel size"),
             options=None, price=12.0, tag="$12.0", desc="This shampoo is long lasting.", bullets=("Long Lasting", "Package includes 1 shampoo")):
    return W.Product(asin=asin, title=title, category=cat.split(" › ")[0], product_category=cat, query=query,
                     attributes=list(attrs), options=options if options is not None else {"size": ["8 ounce", "16 ounce"], "style": ["unscented", "citrus"]},
                     price_tag=tag, price=price, description=desc, bullets=list(bullets))


def _goal(**kw):
    g = dict(asin="b000000001", instruction=I, category="beauty", query="shampoo", name="Lunora Long Lasting Shampoo, Paraben Free",
             product_category="beauty › personal care › shampoo", attributes=["long lasting"], goal_options=["8 ounce"],
             price_upper=20.0, expert_query="long lasting shampoo")
    g.update(kw)
    return W.Goal(**g)


@pytest.fixture()
def hand_env():
    """12 shampoos (two result pages) + a lamp, one goal."""
    ps = [_product(f"B0000000{i:02d}", f"Lunora Long Lasting Shampoo, Variant {i}") for i in range(1, 13)]
    ps[0].asin, ps[0].title = "B000000001", "Lunora Long Lasting Shampoo, Paraben Free"
    ps.append(_product("B000000099", "Drusk Modern Desk Lamp, Easy Install", query="desk lamp", cat="home › home decor › desk lamp",
                       attrs=("easy install",), options={"color": ["black", "white"]}, desc="This desk lamp is modern.", bullets=("Modern design",)))
    shop = W.Shop(products=ps)
    shop._goals[("test", 0)] = _goal()
    env = W.WebShopEnv("test", shop=shop)
    env.reset(0)
    return env


# ---------------------------------------------------------------------------------------------
def test_parse_action_matches_webshop_regex():
    rx = re.compile(r"(.+)\[(.+)\]")
    rnd = random.Random(0)
    for _ in range(5000):
        s = "".join(rnd.choice("ab[]\n ") for _ in range(rnd.randint(0, 12)))
        m = re.match(rx, s)
        assert W.parse_action(s) == ((s, None) if m is None else m.groups()), repr(s)


def test_pages_and_transitions(hand_env):
    e = hand_env
    assert e._render() == f"WebShop [SEP] Instruction: [SEP] {I} [SEP] Search"
    assert e._info()["admissible"] == ["search[<your query>]", "click[search]"]
    obs, r, d, info = e.step("search[Long Lasting Shampoo]")
    head = f"Instruction: [SEP] {I} [SEP] Back to Search"
    assert obs.startswith(f"{head} [SEP] Page 1 (Total results: 12) [SEP] Next > [SEP] B000000001 [SEP] Lunora Long Lasting Shampoo, Paraben Free [SEP] $12.0")
    assert obs.count(" [SEP] $12.0") == 10 and "desk lamp" not in obs.lower()
    assert info["admissible"][:2] == ["click[back to search]", "click[next >]"] and len(info["admissible"]) == 12
    obs, *_ = e.step("click[next >]")
    assert obs.startswith(f"{head} [SEP] Page 2 (Total results: 12) [SEP] < Prev [SEP] Next >") and obs.count("$12.0") == 2
    obs, *_ = e.step("click[next >]")   # past the end: an empty page, still clickable
    assert obs == f"{head} [SEP] Page 3 (Total results: 12) [SEP] < Prev [SEP] Next >"
    e.step("click[< prev]"), e.step("click[< prev]")
    obs, *_ = e.step("click[b000000001]")
    assert obs == (f"{head} [SEP] < Prev [SEP] size [SEP] 8 ounce [SEP] 16 ounce [SEP] style [SEP] unscented [SEP] citrus "
                   "[SEP] Lunora Long Lasting Shampoo, Paraben Free [SEP] Price: $12.0 [SEP] Rating: N.A. [SEP] Description "
                   "[SEP] Features [SEP] Reviews [SEP] Buy Now")
    item = obs
    assert e.step("click[8 ounce]")[0] == item           # options are not marked in text mode
    assert e.step("click[description]")[0] == f"{head} [SEP] < Prev [SEP] This shampoo is long lasting."
    assert e.step("click[< prev]")[0] == item and e.s.options == {"size": "8 ounce"}   # kept
    assert e.step("click[features]")[0] == f"{head} [SEP] < Prev [SEP] Long Lasting [SEP] Package includes 1 shampoo"
    e.step("click[< prev]")
    obs, r, d, info = e.step("click[buy now]")
    assert (r, d, info["won"], info["score"]) == (1.0, True, True, 1.0)
    assert obs == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0"
    assert e.step("click[buy now]") == (obs, 0.0, True, info)   # after done: the last page again


def test_back_to_search_and_prev_from_item(hand_env):
    e = hand_env
    e.step("search[shampoo]"), e.step("click[next >]")
    page2 = e.s.obs
    e.step("click[" + e.s.hits[10] + "]")
    assert e.step("click[< prev]")[0] == page2
    obs, *_ = e.step("click[back to search]")
    assert obs == f"WebShop [SEP] Instruction: [SEP] {I} [SEP] Search"


def test_reward_partial_matches():
    g = _goal(attributes=["long lasting", "paraben free"], goal_options=["8 ounce", "navy blue"], price_upper=20.0)
    p = _product("B1", "Lunora Long Lasting Shampoo, Paraben Free", options={"size": ["8 ounce"], "color": ["blue", "red"]})
    assert W.get_reward(p, g, ["8 ounce", "blue"]) == 1.0                    # navy blue ~ blue via normalize_color
    assert W.get_reward(p, g, ["8 ounce", "red"]) == pytest.approx(4 / 5)     # one option wrong
    assert W.get_reward(p, g, ["8 ounce", "blue"], price=25.0) == pytest.approx(4 / 5)   # over price_upper
    q = _product("B2", "Lunora Shampoo", attrs=("travel size",), desc="A shampoo.", bullets=("Paraben Free formula",))
    # attributes: "long lasting" missing; "paraben free" found as a substring of the bullets
    assert W.attribute_matches(q, g) == 1
    assert W.option_matches(["x-large"], ["large"]) == 1                      # token subset scores 100
    # r_type: other type in another category, no shared nouns -> 0
    lamp = _product("B3", "Drusk Desk Lamp", query="desk lamp", cat="home › home decor › desk lamp")
    assert W.type_reward(lamp, g) == 0.0 and W.get_reward(lamp, g, ["8 ounce", "blue"]) == 0.0
    # shares 1 of 6 title nouns (0.1 <= 1/6 <= 0.2), no query/category match -> 0.5
    g6 = _goal(name="Lunora Hoodie Jeans Coffee Tea Lamp")
    other = _product("B4", "Lunora Desk Basket", query="storage basket", cat="home › home decor › storage basket")
    assert W.type_reward(other, g6) == 0.5
    # same category path (>= 2 levels) keeps 1.0 even with low title overlap above 0.1
    assert W.type_reward(_product("B5", "Lunora Lipstick", query="lipstick", cat="beauty › personal care › lipstick"), g6) == 1.0
    assert W.type_reward(_product("B6", "Quessa Lipstick", query="lipstick"), _goal(name="Lunora Tea")) == 0.0


def test_bad_actions_are_noops(hand_env):
    e = hand_env
    e.step("search[shampoo]"), e.step("click[b000000001]")
    page = e.s.obs
    bad = ["", " ", "click[]", "click[nothing here]", "click[search]", "search[shampoo]", "x" * 1_000_000,
           "[" * 50_000 + "]" * 50_000, "click[ünïcödé 🛒]", "click[[[]]]", "buy now", "CLICK[buy now]", "click[buy now",
           "click[ buy now ]", "click[\nbuy now]", None, 42]
    for a in bad:
        obs, r, d, info = e.step(a)
        assert (obs, r) == (page, 0.0), repr(a)[:40]
        if d:
            break
    assert e.s.steps == 15 and e.s.done and not e._info()["won"]   # the 15-step limit ends it


def test_case_insensitive_click_argument(hand_env):
    e = hand_env
    e.step("search[SHAMPOO]")
    assert e.s.page == "results" and e.step("click[B000000001]")[0].count("Buy Now") == 1


def test_snapshot_restore_exact():
    env = W.make("test", seed=0)
    env.reset(3)
    rnd = random.Random(1)
    for _ in range(3):
        env.step(env.expert_action())
    snap = env.snapshot()
    acts = [rnd.choice(env._info()["admissible"]).replace("<your query>", "coffee") for _ in range(1)] + ["click[< prev]", "click[next >]"]
    a = [env.step(x) for x in acts]
    env.restore(snap)
    b = [env.step(x) for x in acts]
    assert a == b
    env2 = W.make("test", seed=0)
    env2.reset(99)
    env2.restore(snap)
    assert [env2.step(x) for x in acts] == a


def test_expert_succeeds_on_all_generated_tasks():
    for split, n in (("test", W.num_tasks("test")), ("train", 200)):
        env = W.make(split, seed=0)
        for t in range(n):
            env.reset(t)
            for _ in range(env.max_steps):
                obs, r, done, info = env.step(env.expert_action())
                if done:
                    break
            assert info["won"] and r == 1.0, (split, t, info["task"])


def test_expert_recovers_from_detours_mostly():
    env, rnd, wins = W.make("train", seed=0), random.Random(0), 0
    for t in range(100):
        obs, info = env.reset(t)
        for _ in range(env.max_steps):
            a = env.expert_action()
            if rnd.random() < 0.3:
                a = rnd.choice(info["admissible"]).replace("<your query>", "hoodie")
            obs, r, done, info = env.step(a)
            if done:
                break
        wins += info["won"]
    assert wins >= 60


def test_determinism_across_instances():
    a, b = W.make("test", world=3), W.make("test", world=3)
    assert a.reset(7) == b.reset(7) and a.step(a.expert_action()) == b.step(b.expert_action())
    assert W.make("test", world=4).reset(7)[0] != a.reset(7)[0]


def test_the_shop_is_the_worlds_not_the_seeds():
    """Every run seed shops in world 0's store (a warm start shared across seeds was cloned in
    it); `--env-opt world=N` picks another; the real backend refuses the option."""
    s0, s5 = W.make("train", seed=0), W.make("train", seed=5)
    assert s0.shop is s5.shop
    assert [p.title for p in s5.shop.products] == [p.title for p in W.build_catalogue(0)]
    assert all(W.make("test", seed=s).reset(t)[0] == W.make("test", seed=0).reset(t)[0] for s in (1, 2) for t in (0, 9))
    kw = envs.parse_env_opts(W.SPEC, ["world=2"])
    assert kw == {"world": 2} and W.SPEC.make(split="test", seed=0, **kw).shop is W.make("test", world=2).shop
    assert W.make("test", world=2).shop is not s0.shop
    with pytest.raises(ValueError, match="world.*must be >= 0"):
        envs.parse_env_opts(W.SPEC, ["world=-1"])
    with pytest.raises(ValueError, match="real backend"):
        W.make("test", backend="real", world=1)


def test_vocabulary_covers_everything():
    tok = lambda s: re.findall(r"[A-Za-z]+|[0-9]|[^A-Za-z0-9\s]", s)  # noqa: E731
    vocab = {t for w in W.vocabulary() for t in tok(w)}
    env, rnd, seen = W.make("train", world=1), random.Random(0), set()
    qwords = [w for w in W.vocabulary() if " " not in w]
    for t in range(150):
        obs, info = env.reset(t)
        texts = [obs, info["task"]]
        for _ in range(env.max_steps):
            a = env.expert_action() if rnd.random() < 0.5 else rnd.choice(info["admissible"]).replace(
                "<your query>", " ".join(rnd.sample(qwords, 3)))
            obs, r, done, info = env.step(a)
            texts += [a, obs] + info["admissible"]
            texts.append(W.compact_prompt(envs.PromptInput(info["task"], obs, info["admissible"], [(obs, a)], 1)))
            if done:
                break
        for s in texts:
            seen |= set(tok(s))
    assert seen - vocab == set()


def test_tiny_tokenizer_keeps_product_ids_whole():
    """Built-in catalogue ids come from a fixed pool that SPEC.atomic hands to the tiny tokenizer
    (as the page shows them and as the admissible actions list them): the expert's click is an
    admissible action verbatim, and its id is one token, the same token the actions line shows."""
    from infra.warmstart import env_tokenizer
    spec = envs.get_spec("webshop")
    tok = env_tokenizer(spec)
    env = spec.make(split="test", seed=0)
    env.reset(0)
    _, _, _, info = env.step(env.expert_action())        # results page
    a = env.expert_action()
    asin = a[len("click["):-1]
    assert a in info["admissible"] and asin.upper() in W.asin_pool() and asin.upper() in env.s.obs
    for text in (env.s.obs, " | ".join(info["admissible"])):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text and tok.unk_token_id not in ids
    assert tok.convert_ids_to_tokens(tok(f"<action>{a}</action>", add_special_tokens=False)["input_ids"]) == \
        ["<action>", "click", "[", asin, "]", "</action>"]
    assert tok.convert_ids_to_tokens(tok(asin.upper(), add_special_tokens=False)["input_ids"]) == [asin.upper()]
    assert env.step(a)[0].count("Buy Now") == 1


def test_random_detour_actions_are_real_actions():
    """The warm start's ε-detours: a query from the instruction's words on the search page, a
    current clickable elsewhere; each one changes the page or is WebShop's no-op, never raises."""
    rng = random.Random(0)
    env = W.make("train", seed=0)
    for t in range(40):
        obs, info = env.reset(t)
        for _ in range(6):
            a = env.random_action(rng)
            if env.s.page == "search":
                assert a.startswith("search[") and set(a[7:-1].split()) <= set(re.findall(r"[a-z]+", info["task"].lower()))
            else:
                assert a[6:-1].lower() in env.clickables()
            obs, r, done, info = env.step(a)
            if done:
                break


def test_prompts_and_parse():
    env = W.make("test")
    obs, info = env.reset(0)
    v = envs.PromptInput(info["task"], obs, info["admissible"], [], 0)
    p = W.chat_prompt(v, 2)
    assert "WebShop" in p and f"Your task is to: {info['task']}." in p and "'search[<your query>]'," in p
    a = env.expert_action()
    obs2, _, _, info2 = env.step(a)
    v2 = envs.PromptInput(info["task"], obs2, info2["admissible"], [(obs, a)], 1)
    p2 = W.chat_prompt(v2, 2)
    assert "Prior to this step, you have already taken 1 step(s)" in p2 and "'Back to Search' [SEP] 'Page 1" in p2
    c = W.compact_prompt(v2, 2)
    assert c.startswith("task: ") and "Instruction:" not in c
    assert W.SPEC.parse("<action>Click[Buy Now]</action>") == ("click[buy now]", True)
    assert W.SPEC.task_types == W.TASK_TYPES and envs.get_spec("webshop") is W.SPEC


def test_real_backend_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("WEBSHOP_PATH", raising=False)
    with pytest.raises(RuntimeError, match="WEBSHOP_PATH"):
        W.make(backend="real")
    with pytest.raises(RuntimeError, match="setup.sh"):
        W.make(backend="real", webshop_path=str(tmp_path))
    with pytest.raises(ValueError):
        W.make(backend="nope")
