// QuickJS features, printed so that a native and a guest run can be compared byte for byte.
// No Math.random and no clock: the output depends on nothing but the engine.
function section(name) { print("== " + name); }

section("closures");
function counter(start) { let n = start; return { next: () => ++n, reset() { n = start; } }; }
const c = counter(10);
print(c.next(), c.next(), c.next()); c.reset(); print(c.next());
const adders = []; for (let i = 0; i < 5; i++) adders.push(x => x + i);
print(adders.map(f => f(100)).join(","));
const compose = (...fs) => x => fs.reduceRight((acc, f) => f(acc), x);
print(compose(x => x * 2, x => x + 3, Math.abs)(-7));
function curry(f) { return function g(...a) { return a.length >= f.length ? f(...a) : (...b) => g(...a, ...b); }; }
print(curry((a, b, c) => a * 100 + b * 10 + c)(1)(2)(3));

section("classes");
class Shape {
  #id; static count = 0;
  constructor(name) { this.name = name; this.#id = ++Shape.count; }
  get id() { return this.#id; }
  area() { return 0; }
  toString() { return `${this.name}#${this.id} area=${this.area().toFixed(3)}`; }
}
class Circle extends Shape { constructor(r) { super("circle"); this.r = r; } area() { return Math.PI * this.r ** 2; } }
class Rect extends Shape { constructor(w, h) { super("rect"); this.w = w; this.h = h; } area() { return this.w * this.h; } }
class Square extends Rect { constructor(s) { super(s, s); this.name = "square"; } static unit() { return new Square(1); } }
const shapes = [new Circle(1.5), new Rect(2, 3.25), new Square(4), Square.unit()];
for (const s of shapes) print(String(s), s instanceof Rect, Object.getPrototypeOf(s).constructor.name);
print("total", shapes.reduce((a, s) => a + s.area(), 0).toFixed(6), "count", Shape.count);

section("generators and iterators");
function* fib() { let [a, b] = [0, 1]; for (;;) { yield a; [a, b] = [b, a + b]; } }
function* take(n, it) { for (const x of it) { if (n-- <= 0) return; yield x; } }
print([...take(15, fib())].join(" "));
function* twoWay() { let got = yield "first"; while (got !== "stop") got = yield "echo:" + got; return "done"; }
const tw = twoWay(); print(tw.next().value, tw.next("a").value, tw.next("b").value, JSON.stringify(tw.next("stop")));
const range = { from: 3, to: 7, [Symbol.iterator]() { let v = this.from, t = this.to; return { next: () => v <= t ? { value: v++, done: false } : { value: undefined, done: true } }; } };
print(Array.from(range, x => x * x).join(","));
const m = new Map([["b", 2], ["a", 1]]); m.set("c", 3);
print([...m.entries()].map(([k, v]) => k + "=" + v).join("&"), new Set("mississippi").size);

section("promises");
const order = [];
Promise.resolve(1).then(v => { order.push("then " + v); return v + 1; }).then(v => order.push("then " + v));
new Promise((_, reject) => reject(new Error("nope"))).catch(e => order.push("caught " + e.message));
(async () => { order.push("async start"); const v = await Promise.all([1, Promise.resolve(2), new Promise(r => r(3))]); order.push("all " + v.join("+")); try { await Promise.reject(new RangeError("bad")); } catch (e) { order.push("await caught " + e.name); } })();
Promise.allSettled([Promise.reject(1), Promise.resolve(2)]).then(r => order.push(r.map(x => x.status).join("/")));
Promise.race([new Promise(r => r("fast")), Promise.resolve("also")]).then(v => order.push("race " + v));
order.push("sync end");
Promise.resolve().then(() => Promise.resolve()).then(() => Promise.resolve()).then(() => { print(order.join("; ")); });

section("JSON");
const data = { name: "capsule", n: 42, pi: 3.14159, list: [1, "two", null, true, { deep: [1.5e-7, -0.0, 1e21] }], esc: "tab\tquote\"nl\n\u00e9\u2028" };
const text = JSON.stringify(data);
print(text);
const back = JSON.parse(text);
print(back.list[4].deep[2], back.esc.length, JSON.stringify(back) === text);
print(JSON.stringify(data, ["name", "n"], 2));
print(JSON.stringify({ d: new Date(0), u: undefined, f() {}, s: Symbol("x") }), JSON.stringify([undefined, () => 1]));
print(JSON.parse('{"a":[1,{"b":2}]}', (k, v) => typeof v === "number" ? v * 10 : v).a[1].b);
try { JSON.parse("{bad json"); } catch (e) { print(e.name, e.message); }

section("regular expressions");
const re = /(\d{4})-(\d{2})-(\d{2})/g;
const dates = "from 2024-01-15 to 2025-12-31 and 1999-07-04";
print(dates.replace(re, "$3/$2/$1"));
print([...dates.matchAll(re)].map(x => x[1] + "@" + x.index).join(" "));
const named = /(?<key>\w+)=(?<val>[^;]*)/g;
print(Array.from("a=1;bb=two;c=".matchAll(named), x => `${x.groups.key}:${x.groups.val}`).join(","));
print("The Quick Brown Fox".split(/\s+/).map(w => w.replace(/^./, ch => ch.toLowerCase())).join("_"));
print(/^[\w.+-]+@[\w-]+\.[a-z]{2,}$/i.test("User.Name+tag@Example.COM"), /colou?r/.exec("my colour")[0]);
print("aaa bbb".replace(/(?<=a)a/g, "X"), "x1y22z333".split(/\d+/).join("|"), /\u{1F600}/u.test("smile \u{1F600}"));
print("café".normalize("NFD").length, /[\p{L}]+/u.exec("123 héllo")[0]);

section("sort");
const people = [["ann", 31], ["bob", 25], ["cid", 31], ["dee", 19], ["eve", 25], ["fay", 42]];
print(people.slice().sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? 1 : -1)).map(p => p.join(":")).join(" "));
const nums = []; let seed = 12345;
for (let i = 0; i < 2000; i++) { seed = (seed * 1103515245 + 12345) % 2147483648; nums.push(seed % 10000 - 5000); }
nums.sort((a, b) => a - b);
print(nums.slice(0, 5).join(","), nums.slice(-5).join(","), nums.every((v, i) => i === 0 || nums[i - 1] <= v));
print(["b", "a", "C", "á", "10", "9"].sort().join(","), [10, 9, 1, 100].sort().join(","));

section("typed arrays");
const buf = new ArrayBuffer(16); const dv = new DataView(buf);
dv.setFloat64(0, Math.E); dv.setInt32(8, -2, true); dv.setUint16(12, 0xBEEF);
print(Array.from(new Uint8Array(buf), b => b.toString(16).padStart(2, "0")).join(""));
const f32 = new Float32Array([1.1, 2.2, 3.3]); print(f32.join(" "), f32.map(x => x * 2).join(" "));
const i16 = Int16Array.from([40000, -40000, 32767]); print(i16.join(","), new Uint8ClampedArray([300, -5, 127.5]).join(","));
const u32 = new Uint32Array(8).fill(7, 2, 5); u32.set([1, 2], 6); print(u32.join(""), u32.subarray(2, 6).reduce((a, b) => a + b));
const big = new BigInt64Array([2n ** 62n, -(2n ** 63n)]); print(big.join(","), (2n ** 100n).toString(36));

section("strings");
const s = "Hello, wörld! ";
print(s.trim().toUpperCase(), s.length, s.padEnd(20, "*") + "|", s.repeat(2).trimEnd());
print(s.indexOf("o"), s.lastIndexOf("o"), s.includes("wör"), s.startsWith("Hell"), s.endsWith("! "));
print(s.split("").reverse().join(""), s.slice(-7, -2), s.substring(4, 1), s.charAt(s.length - 2), s.codePointAt(8));
print(String.fromCharCode(72, 105), "\u{1F600}".length, [..."\u{1F600}x"].length, "abc".localeCompare("abd"));
print(`template ${1 + 1} ${[1, 2].map(x => `<${x}>`).join("")}`, String.raw`a\nb${2}`, "a-b-c".replaceAll("-", "+"));
print((1234.5678).toFixed(2), (0.000123).toExponential(2), (123.456).toPrecision(4), (255).toString(2), parseInt("ff", 16), parseFloat("3.5e2x"));
print(1 / 3, 0.1 + 0.2, 1e21, 123e-20, -0, 2 ** 53 + 1, Number.MAX_SAFE_INTEGER, (-1.5).toFixed(0), Math.round(-2.5));
print(escape("a b&c"), encodeURIComponent("ä/?=&"), decodeURIComponent("%E2%82%AC"));

section("exceptions");
class AppError extends Error { constructor(msg, code) { super(msg); this.name = "AppError"; this.code = code; } }
function risky(n) { if (n > 2) throw new AppError("too big: " + n, 7); return n * 2; }
for (const n of [1, 3]) { try { print("risky", risky(n)); } catch (e) { print("caught", e.name, e.message, e.code, e instanceof Error); } finally { print("finally", n); } }
try { null.prop; } catch (e) { print(e.constructor.name, e.message); }
try { undefinedFunction(); } catch (e) { print(e.name, e.message); }
try { new Array(-1); } catch (e) { print(e.name, e.message); }
function deep(n) { return n === 0 ? (() => { throw new Error("bottom"); })() : deep(n - 1); }
try { deep(50); } catch (e) { print("deep", e.message); }
const nested = () => { try { try { throw 1; } finally { print("inner finally"); } } catch (x) { return "outer got " + x; } };
print(nested());

print("end of script");
