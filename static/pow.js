// seckill 秒杀 — the puzzle of guarded sales: find a nonce such that SHA-256(challenge ‖ nonce)
// starts with `difficulty` zero bits (see GET /api/v1/products/{id}/challenge). Plain SHA-256
// (FIPS 180-4) on 32-bit integers, because Web Crypto's digest exists only on secure origins
// (https, localhost) and costs a promise per hash. The challenge's whole 64-byte blocks are
// hashed once; each try hashes only the rest and its nonce. It works in slices, so the page
// stays responsive while it searches. No eval, nothing inline: fine under the pages' CSP.
'use strict';

(function () {
  const K = new Int32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  ]);
  const INITIAL = new Int32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const W = new Int32Array(64);
  // Tries between two yields to the page: a few milliseconds of work.
  const SLICE = 20000;

  // Mixes the 64-byte block of `bytes` at `at` into the hash state `h`.
  function compress(h, bytes, at) {
    for (let i = 0; i < 16; i++, at += 4) {
      W[i] = (bytes[at] << 24) | (bytes[at + 1] << 16) | (bytes[at + 2] << 8) | bytes[at + 3];
    }
    for (let i = 16; i < 64; i++) {
      const x = W[i - 15];
      const y = W[i - 2];
      const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
      const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
      W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
    }
    let a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (let i = 0; i < 64; i++) {
      const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const t1 = (k + s1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
      const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const t2 = (s0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      k = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    h[0] = (h[0] + a) | 0; h[1] = (h[1] + b) | 0; h[2] = (h[2] + c) | 0; h[3] = (h[3] + d) | 0;
    h[4] = (h[4] + e) | 0; h[5] = (h[5] + f) | 0; h[6] = (h[6] + g) | 0; h[7] = (h[7] + k) | 0;
  }

  // The leading zero bits of a hash state read as the digest's bytes.
  function zeroBits(h) {
    let bits = 0;
    for (let i = 0; i < 8; i++) {
      const z = Math.clz32(h[i]);
      bits += z;
      if (z < 32) break;
    }
    return bits;
  }

  // A searcher for one challenge: `digestOf(nonce)` is the state after hashing
  // challenge ‖ nonce, the challenge's whole blocks hashed once.
  function searcher(challenge) {
    const prefix = new TextEncoder().encode(challenge);
    const whole = prefix.length - (prefix.length % 64);
    const middle = INITIAL.slice();
    for (let at = 0; at < whole; at += 64) compress(middle, prefix, at);
    // The rest of the challenge, a nonce, the padding and the length: at most three blocks.
    const tail = new Uint8Array(192);
    tail.set(prefix.subarray(whole));
    const rest = prefix.length - whole;
    const state = new Int32Array(8);
    return function digestOf(nonce) {
      let end = rest;
      for (let i = 0; i < nonce.length; i++) tail[end++] = nonce.charCodeAt(i);
      const bits = (prefix.length + nonce.length) * 8;
      tail[end++] = 0x80;
      const blocks = (end + 8 + 63) & ~63;
      tail.fill(0, end, blocks - 4);
      tail[blocks - 4] = bits >>> 24;
      tail[blocks - 3] = bits >>> 16;
      tail[blocks - 2] = bits >>> 8;
      tail[blocks - 1] = bits;
      state.set(middle);
      for (let at = 0; at < blocks; at += 64) compress(state, tail, at);
      return state;
    };
  }

  // The first decimal nonce (0, 1, 2, …) whose hash with `challenge` has `difficulty` leading
  // zero bits, as a promise; nonces are ASCII, so their characters are their bytes.
  function solve(challenge, difficulty) {
    const digestOf = searcher(challenge);
    let n = 0;
    return new Promise((resolve) => {
      const work = () => {
        for (const until = n + SLICE; n < until; n++) {
          const nonce = String(n);
          if (zeroBits(digestOf(nonce)) >= difficulty) {
            resolve(nonce);
            return;
          }
        }
        setTimeout(work, 0);
      };
      work();
    });
  }

  // SHA-256 of `text` in hex, to check the hashing against known digests.
  function sha256Hex(text) {
    const h = searcher(text)('');
    return Array.from(h, (w) => (w >>> 0).toString(16).padStart(8, '0')).join('');
  }

  window.seckillPow = { solve: solve, sha256Hex: sha256Hex };
})();
