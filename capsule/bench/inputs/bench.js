// Work for the kernel/native time ratio of QuickJS (capsule bench programs): calls, objects, strings,
// floats, sorting, generators. Prints checksums only, so the native and the kernel run are compared byte for byte.
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

function sieve(n) {
  const composite = new Uint8Array(n + 1);
  let count = 0;
  for (let i = 2; i <= n; i++) {
    if (composite[i]) continue;
    count++;
    for (let j = i * i; j <= n; j += i) composite[j] = 1;
  }
  return count;
}

function strings(n) {
  const parts = [];
  for (let i = 1; i <= n; i++) parts.push(`${i}:${(i * 7).toString(16)}:${(i / 3).toFixed(2)}`);
  const s = parts.join(",");
  let h = 0;
  for (const w of s.split(",")) h = (h * 31 + w.length) % 1000000007;
  return [s.length, s.replace(/[^0-9]/g, "").length, h].join(" ");
}

function floats(n) {
  let x = 0.0, y = 1.0;
  for (let i = 1; i <= n; i++) { x += Math.sin(i) * y; y = y * 0.999999 + 1e-7; }
  return x.toFixed(6);
}

function sorting(n) {
  let seed = 12345;
  const t = [];
  for (let i = 0; i < n; i++) { seed = (seed * 1103515245 + 12345) % 2147483648; t.push(seed); }
  t.sort((a, b) => b - a);
  return [t[0] % 1000, t[n >> 1] % 1000, t[n - 1] % 1000].join(" ");
}

function objects(n) {
  const m = new Map();
  for (let i = 0; i < n; i++) {
    const k = "k" + (i % 997);
    const o = m.get(k) || { count: 0, sum: 0 };
    o.count++; o.sum += i;
    m.set(k, o);
  }
  let h = 0;
  for (const [k, o] of m) h = (h + k.length * o.count + o.sum) % 1000000007;
  return h;
}

function* counter(n) { for (let i = 1; i <= n; i++) yield i; }
function generators(n) { let s = 0; for (const v of counter(n)) s += v; return s; }

print("bench fib", fib(22));
print("bench sieve", sieve(200000));
print("bench strings", strings(20000));
print("bench floats", floats(50000));
print("bench sort", sorting(20000));
print("bench objects", objects(100000));
print("bench generators", generators(50000));
