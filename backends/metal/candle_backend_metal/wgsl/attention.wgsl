// needs: math workgroup
// Scaled-dot-product attention, a workgroup per query row (see fused.py). The including source
// defines the bindings (o, q, k, v: o_st, q_ld...), P and at(), and mask_score(s, i): the score s
// with the mask's element i applied.
// P: L, S, E, Ev, causal, scale, rank, batch shape at 7.., then for q, k, v and the mask:
//    offset, batch strides, row stride, column stride (rank + 3 words each), then the rows in all
var<workgroup> qs: array<f32, 1024>;
var<workgroup> ps: array<f32, 256>;
fn lay(z: u32, which: u32) -> u32 { let r = P[6]; return 7u + r + which * (r + 3u); }
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let nl = P[0]; let ns = P[1]; let ne = P[2]; let nv = P[3];
  let rank = P[6];
  let total = P[7u + rank + 4u * (rank + 3u)];
  let o = min(wid.x + wid.y * nwg.x, total - 1u);
  let z = o / nl;
  let i = o % nl;
  let ql = lay(z, 0u); let kl = lay(z, 1u); let vl = lay(z, 2u); let ml = lay(z, 3u);
  let qo = at(z, ql, 7u, rank) + i * P[ql + rank + 1u];
  let kb = at(z, kl, 7u, rank);
  let vb = at(z, vl, 7u, rank);
  let mrow = ml + rank + 1u;
  let mo = at(z, ml, 7u, rank) + i * P[mrow];
  let scale = bitcast<f32>(P[5]);
  for (var e = t; e < ne; e += 256u) { qs[e] = q_ld(qo + e * P[ql + rank + 2u]) * scale; }
  workgroupBarrier();
  let kend = select(ns, min(ns, i + 1u), P[4] != 0u);
  var m = -inf_f();
  var l = 0.0;
  var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
  for (var j0 = 0u; j0 < kend; j0 += 256u) {
    let j = j0 + t;
    var s = -inf_f();
    if (j < kend) {
      s = 0.0;
      let ko = kb + j * P[kl + rank + 1u];
      for (var e = 0u; e < ne; e++) { s = fma(qs[e], k_ld(ko + e * P[kl + rank + 2u]), s); }
      s = mask_score(s, mo + j * P[mrow + 1u]);
    }
    let nm = max_f(m, wg_max(t, s));
    let live = nm > -inf_f() || isnan_f(nm);
    let p = select(0.0, exp_f(s - nm), live);
    let corr = select(0.0, exp_f(m - nm), live && m > -inf_f());
    ps[t] = p;
    l = l * corr + wg_sum(t, p);
    let cnt = min(256u, kend - j0);
    for (var c = 0u; c < 4u; c++) {
      let col = t + c * 256u;
      acc[c] = acc[c] * corr;
      if (col < nv) {
        for (var jj = 0u; jj < cnt; jj++) {
          let pj = ps[jj];
          if (pj != 0.0 || isnan_f(pj)) {
            acc[c] = fma(pj, v_ld(vb + (j0 + jj) * P[vl + rank + 1u] + col * P[vl + rank + 2u]), acc[c]);
          }
        }
      }
    }
    m = nm;
    workgroupBarrier();
  }
  for (var c = 0u; c < 4u; c++) {
    let col = t + c * 256u;
    if (col < nv && wid.x + wid.y * nwg.x < total) {
      o_st(o * nv + col, select(acc[c] / l, 0.0, m == -inf_f()));
    }
  }
}
