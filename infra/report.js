
(function(){
const DATA = JSON.parse(document.getElementById('report-data').textContent);
const ORDER = ['credited','not credited','dropped','eligible','mixed','uniform'];
const HELP = {'credited':'ProVer: Δ̂ > margin, credit applied; other methods: some turn\'s advantage changed',
  'not credited':'ProVer: judged and verified, Δ̂ ≤ margin','dropped':'ProVer: the proposal was dropped (reason shown)',
  'eligible':'1..3 successes, advantages unchanged','mixed':'outcomes differ, not eligible','uniform':'all outcomes equal'};
const NAMES = {'prover':'ProVer','gigpo':'GiGPO','spo-chain':'SPO-chain','spo-tree':'SPO-tree','criticsearch':'CriticSearch','grpo-matched':'GRPO-matched','grpo':'GRPO'};
function h(tag, attrs, ...kids){
  const e = document.createElement(tag);
  for (const [k,v] of Object.entries(attrs||{})){
    if (v==null || v===false) continue;
    if (k==='class') e.className = v; else if (k==='style') e.style.cssText = v; else e.setAttribute(k, v===true ? '' : v);
  }
  for (const c of kids.flat()){ if (c==null || c===false) continue; e.append(c.nodeType ? c : document.createTextNode(String(c))); }
  return e;
}
const sg = (x,d=3) => x==null ? '?' : (x>=0 ? '+' : '−') + Math.abs(x).toFixed(d);
const f3 = (x) => x==null ? '?' : Number(x).toFixed(3);
const slug = (s) => s.replace(/\s+/g,'-');
function color(a){
  if (a==null) return '#ddd';
  const t = Math.max(-1, Math.min(1, a)), base = [247,247,247], pos = [26,152,80], neg = [215,48,39];
  const c = t>=0 ? pos : neg, k = Math.abs(t);
  return 'rgb(' + base.map((b,i) => Math.round(b + (c[i]-b)*k)).join(',') + ')';
}
function dots(xs){
  return h('span',{class:'dots'}, xs.map(v => v===1 ? h('span',{class:'o1',title:'success'}) :
    v===0 ? h('span',{class:'o0',title:'failure'}) : h('b',{}, Number(v).toFixed(2)+' ')));
}
function strip(tr, seg){
  const rows = [['G', tr.A], ['F', tr.F]];
  return h('div',{class:'strip'}, rows.map(([lab, xs]) => h('div',{class:'srow', title: lab==='G' ? 'GRPO advantage per turn' : 'final advantage per turn'},
    h('i',{},lab), (tr.F||[]).map((_,t) => {
      const a = xs ? xs[t] : null, inSeg = seg && t>=seg[0] && t<=seg[1];
      const cls = [inSeg ? 'sg' : '', tr.truth && tr.truth[t] ? 'pk' : ''].join(' ').trim();
      return h('span',{class: cls || null, style:'background:'+color(a),
        title:'turn '+(t+tr.s0)+': GRPO '+(tr.A ? f3(tr.A[t]) : 'n/a')+' → final '+f3(tr.F[t])+(tr.truth && tr.truth[t] ? ' ['+tr.truth[t]+']' : '')});
    }))));
}
function judgePanel(j, g){
  if (!j) return null;
  const head = h('div',{}, h('b',{},'Judge'), ' examined success #'+j.traj+' · ',
    h('span',{class:'k'},'status '), j.status, j.repairs ? ' ('+j.repairs+' repairs)' : '', ' · ', h('span',{class:'k'},'tool calls '), j.tools);
  if (j.start==null) return h('div',{class:'judge'}, head, h('div',{class:'drop'}, 'dropped: '+(j.reason||'?')));
  const verdict = j.applied ? 'credited: +λ·Δ̂ on turns '+j.start+'–'+j.end : 'no credit (Δ̂ ≤ margin)';
  return h('div',{class:'judge'}, head,
    h('div',{}, h('span',{class:'k'},'failure mode: '), j.mode||'—'),
    h('div',{}, h('span',{class:'k'},'rationale: '), j.why||'—'),
    h('div',{class:'verif'}, h('b',{},'Δ̂ = '+sg(j.delta)+' ± '+f3(j.se)), ' (K = '+j.k+') · from s_pre (before turn '+j.start+'): ',
      dots(j.pre||[]), ' SR '+f3(j.sr_pre)+' → from s_post (after turn '+j.end+'): ', dots(j.post||[]), ' SR '+f3(j.sr_post)+' · ', h('b',{}, verdict)));
}
function creditSummary(g, method){
  if (method==='prover' || method==='grpo') return null;
  let n=0, s=0, m=0;
  for (const tr of g.trajs) for (let t=0; t<tr.F.length; t++){
    const c = tr.A ? tr.F[t]-tr.A[t] : tr.F[t];
    if (Math.abs(c) > 1e-9){ n++; s += Math.abs(c); m = Math.max(m, Math.abs(c)); }
  }
  const what = (method==='spo-chain'||method==='spo-tree') ? 'SPO replaces GRPO\'s advantage in eligible groups (branches without a GRPO value: F only)' :
    method==='criticsearch' ? 'F − G = α × the critic\'s normalised turn label' : method==='gigpo' ? 'F − G = ω × the step advantage within same-observation turns' :
    method==='grpo-matched' ? 'extra rollouts joined the group' : '';
  return h('div',{class:'csum'}, h('b',{}, NAMES[method]||method), ': ', n ? n+' turns changed (mean |F − G| '+(s/n).toFixed(3)+', max '+m.toFixed(3)+')' : 'no turn changed', what ? ' · '+what : '');
}
function groupCard(g, rec, method){
  const j = g.judge, seg = j && j.start!=null ? [j.start, j.end] : null;
  const card = h('div',{class:'group st-'+slug(g.status), 'data-status':g.status, 'data-type':g.type});
  card.append(h('div',{class:'ghead'}, h('span',{class:'badge st-'+slug(g.status), title:HELP[g.status]||''}, g.status),
    g.reason ? h('span',{class:'badge st-dropped'}, g.reason) : null,
    h('b',{}, 'update '+rec.step+' · group '+g.gid), ' · task '+g.task+' ('+g.type+') · '+g.succ+'/'+g.G+' successes'+(g.eligible ? ' · eligible' : '')+' · ',
    h('span',{class:'task'}, g.text)));
  card.append(judgePanel(j, g) || creditSummary(g, method) || '');
  const thead = h('tr',{}, h('th',{class:'tn'},'turn'), g.trajs.map(tr => h('th',{class: tr.won ? 'win' : 'lose'},
    h('span',{class:'oc'}, tr.won ? '✓' : '✗'), ' #'+tr.i+' R='+tr.R+' · '+tr.n+' turns'+(tr.s0 ? ' (branch from '+tr.s0+')' : ''),
    strip(tr, j && j.sid!=null && g.trajs.indexOf(tr)===j.sid ? seg : null))));
  const texts = g.trajs.map(tr => { const m = {}; for (const x of tr.txt) m[x[0]] = x; return m; });
  const maxT = Math.max(0, ...g.trajs.map(tr => tr.s0 + tr.F.length));
  const body = []; let gapFrom = null;
  const flush = (T) => { if (gapFrom!=null){ body.push(h('tr',{}, h('td',{class:'tn'}, gapFrom+(T-1>gapFrom ? '–'+(T-1) : '')),
      h('td',{class:'gap', colspan:g.trajs.length}, '… text not recorded for these turns (every turn is in the strips) …'))); gapFrom = null; } };
  for (let T=0; T<maxT; T++){
    const any = g.trajs.some((tr,i) => texts[i][T-tr.s0]);
    if (!any){ if (gapFrom==null) gapFrom = T; continue; }
    flush(T);
    body.push(h('tr',{}, h('td',{class:'tn'}, T), g.trajs.map((tr,i) => {
      const t = T - tr.s0;
      if (t<0 || t>=tr.F.length) return h('td',{class:'none'});
      const x = texts[i][t], truth = tr.truth && tr.truth[t], ok = tr.ok[t];
      const isSeg = seg && j.sid===i && t>=seg[0] && t<=seg[1];
      const c = tr.A ? tr.F[t]-tr.A[t] : null;
      const badges = [truth ? h('span',{class:'pv pv-'+truth}, truth.toUpperCase()) : null,
        ok==='x' ? h('span',{class:'bad'},'no <action> tag') : ok==='n' ? h('span',{class:'bad'},'not admissible') : null,
        c!=null && Math.abs(c)>1e-9 ? h('span',{class:'cd '+(c>0?'pos':'neg'), title:'final − GRPO advantage'}, sg(c)) : null];
      const cls = ['cell', isSeg ? 'seg' : '', isSeg && j.applied ? 'applied' : '', x ? '' : 'el'].join(' ').replace(/\s+/g,' ').trim();
      const td = h('td',{class:cls});
      if (isSeg && t===seg[0]) td.append(h('div',{class:'seg-label'}, 'judged segment '+seg[0]+'–'+seg[1]+' · Δ̂ = '+sg(j.delta)+' ± '+f3(j.se)+(j.applied ? ' · credited' : ' · not credited')));
      if (x){ td.append(h('div',{class:'act'}, x[1] || '(empty)'));
              if (x[3] && x[3]!==x[1]) td.append(h('div',{class:'raw', title:'raw output (no <action> tag)'}, x[3]));
              td.append(h('div',{class:'obs'}, x[2])); }
      else td.append('·');
      td.append(h('div',{}, badges));
      return td; })));
  }
  flush(maxT);
  card.append(h('div',{class:'tscroll'}, h('table',{class:'traj'}, h('thead',{},thead), h('tbody',{},body))));
  if (g.trajs_total > g.trajs.length) card.append(h('div',{class:'legend'}, (g.trajs_total-g.trajs.length)+' more trajectories not recorded'));
  return card;
}
function defaultStep(run){
  const recs = run.records; if (!recs.length) return null;
  for (const pick of [g => g.judge && g.judge.start!=null && g.judge.applied, g => g.judge && g.judge.start!=null, g => g.status==='credited'])
    for (let i=recs.length-1; i>=0; i--) if (recs[i].groups.some(pick)) return recs[i].step;
  return recs[recs.length-1].step;
}
function initGroups(k){
  const run = DATA.runs[k], box = document.getElementById('groups-'+k);
  const ctl = box.querySelector('.controls'), out = box.querySelector('.gv');
  if (!run.records.length){ out.append(h('p',{class:'empty'},'No update records yet (records.jsonl is written from update 1 on).')); ctl.remove(); return; }
  const sel = h('select',{class:'upd-sel'}, run.records.map(r => h('option',{value:r.step}, 'update '+r.step+' · '+r.groups.filter(g => g.status==='credited').length+' credited')),
    h('option',{value:'all'}, 'all recorded updates'));
  sel.value = String(defaultStep(run));
  const st = {}; ORDER.forEach(s => st[s] = h('input',{type:'checkbox', checked:true}));
  const types = [...new Set(run.records.flatMap(r => r.groups.map(g => g.type)))].sort();
  const typ = h('select',{}, h('option',{value:''},'all task types'), types.map(t => h('option',{value:t}, t)));
  ctl.append(h('label',{}, 'Update ', sel), h('span',{}, 'Show: ', ORDER.map(s => h('label',{title:HELP[s]}, st[s], ' '+s+' '))), h('label',{}, typ));
  const count = h('span',{class:'legend'}); ctl.append(count);
  function render(){
    out.textContent = '';
    const recs = sel.value==='all' ? run.records : run.records.filter(r => String(r.step)===sel.value);
    let shown = 0, total = 0;
    for (const rec of recs){
      if (sel.value!=='all'){
        const stats = Object.entries(rec.stats||{}).map(([a,b]) => a+' '+(typeof b==='number' ? +b.toFixed(3) : b)).join(' · ');
        out.append(h('p',{class:'ustats'}, 'update '+rec.step+': '+rec.groups.length+' groups recorded (of '+rec.groups_total+' offered, best first)'+(stats ? ' · '+stats : '')));
      }
      for (const g of rec.groups){
        total++;
        if (!st[g.status] || !st[g.status].checked || (typ.value && g.type!==typ.value)) continue;
        if (shown >= 40) continue;
        out.append(groupCard(g, rec, run.method)); shown++;
      }
    }
    count.textContent = 'showing '+shown+' of '+total+' recorded groups'+(shown>=40 ? ' (first 40)' : '');
    if (!shown) out.append(h('p',{class:'empty'},'No recorded group matches the filters.'));
  }
  [sel, typ, ...Object.values(st)].forEach(e => e.addEventListener('change', render));
  box._select = (step) => { sel.value = String(step); render(); box.scrollIntoView(); };
  render();
}
function showRun(k){
  document.querySelectorAll('.run').forEach(e => e.classList.toggle('on', e.dataset.run===String(k)));
  document.querySelectorAll('nav.tabs button').forEach(e => e.classList.toggle('on', e.dataset.run===String(k)));
}
try {
  if (location.hash==='#groups') document.body.classList.add('only-groups');
  DATA.runs.forEach((_,k) => initGroups(k));
  document.querySelectorAll('nav.tabs button').forEach(b => b.addEventListener('click', () => showRun(b.dataset.run)));
  document.querySelectorAll('button.view').forEach(b => b.addEventListener('click', () => {
    showRun(b.dataset.run); document.getElementById('groups-'+b.dataset.run)._select(b.dataset.step); }));
  showRun(0);
} catch (e) {
  document.body.prepend(h('pre',{class:'err'}, 'report.html: script error: '+e+'\n'+(e.stack||'')));
}
})();
