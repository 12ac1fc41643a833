// needs: arith_l
// Philox4x32-10: ten rounds of two 32x32 -> 64-bit products, the key bumped by Weyl constants.
fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
  var c = counter;
  var k = key;
  for (var i = 0; i < 10; i++) {
    let p0 = l_mul32(0xD2511F53u, c.x);
    let p1 = l_mul32(0xCD9E8D57u, c.z);
    c = vec4<u32>(p1.y ^ c.y ^ k.x, p1.x, p0.y ^ c.w ^ k.y, p0.x);
    k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
  }
  return c;
}
