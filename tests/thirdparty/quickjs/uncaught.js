// An exception nobody catches: qjs prints it with its stack on stderr and exits with status 1; no job runs.
function section(name) { print("== " + name); }
section("uncaught");
Promise.resolve().then(() => print("this job never runs"));
print("about to throw");
function fail(depth) { if (depth > 0) return fail(depth - 1); throw new TypeError("this exception is not caught"); }
fail(3);
print("not reached");
