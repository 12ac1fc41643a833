// needs: arith_f
// Reductions over a workgroup of 256 threads.
var<workgroup> red: array<f32, 256>;
// A workgroup's max or sum in two levels of 16: four barriers where a tree takes nine (on lavapipe
// barriers cost far more than the adds); every thread gets the result.
fn wg_reduce(t: u32, v: f32, is_max: bool) -> f32 {
  red[t] = v;
  workgroupBarrier();
  if (t < 16u) {
    var a = red[t * 16u];
    for (var i = 1u; i < 16u; i++) { a = select(a + red[t * 16u + i], max_f(a, red[t * 16u + i]), is_max); }
    red[t * 16u] = a;
  }
  workgroupBarrier();
  if (t == 0u) {
    var a = red[0];
    for (var i = 1u; i < 16u; i++) { a = select(a + red[i * 16u], max_f(a, red[i * 16u]), is_max); }
    red[0] = a;
  }
  workgroupBarrier();
  let m = red[0];
  workgroupBarrier();
  return m;
}
fn wg_max(t: u32, v: f32) -> f32 { return wg_reduce(t, v, true); }
fn wg_sum(t: u32, v: f32) -> f32 { return wg_reduce(t, v, false); }
