/* A small stack-machine bytecode interpreter with a dense switch (clang makes it a br_table), running
 * programs built in linear memory: loops, calls, arithmetic. */
#define NOINLINE __attribute__((noinline))
typedef long long i64;

enum { PUSH, ADD, SUB, MUL, DIV, MOD, DUP, SWAP, DROP, OVER, JMP, JZ, JNZ, LT, EQ, NEG, AND, OR, XOR, SHL, SHR,
       LOAD, STORE, INC, DEC, CALL, RET, HALT, NOP };

static int code[512];
static i64 mem[16];

NOINLINE i64 run(int entry, i64 arg, int fuel) {
    i64 st[64];
    int rs[16];
    int sp = 0, rp = 0, pc = entry;
    st[sp++] = arg;
    while (fuel-- > 0) {
        int op = code[pc++];
        switch (op) {
        case PUSH: st[sp++] = code[pc++]; break;
        case ADD: sp--; st[sp - 1] += st[sp]; break;
        case SUB: sp--; st[sp - 1] -= st[sp]; break;
        case MUL: sp--; st[sp - 1] *= st[sp]; break;
        case DIV: sp--; st[sp - 1] = st[sp] ? st[sp - 1] / st[sp] : 0; break;
        case MOD: sp--; st[sp - 1] = st[sp] ? st[sp - 1] % st[sp] : 0; break;
        case DUP: st[sp] = st[sp - 1]; sp++; break;
        case SWAP: { i64 t = st[sp - 1]; st[sp - 1] = st[sp - 2]; st[sp - 2] = t; } break;
        case DROP: sp--; break;
        case OVER: st[sp] = st[sp - 2]; sp++; break;
        case JMP: pc = code[pc]; break;
        case JZ: pc = st[--sp] == 0 ? code[pc] : pc + 1; break;
        case JNZ: pc = st[--sp] != 0 ? code[pc] : pc + 1; break;
        case LT: sp--; st[sp - 1] = st[sp - 1] < st[sp]; break;
        case EQ: sp--; st[sp - 1] = st[sp - 1] == st[sp]; break;
        case NEG: st[sp - 1] = -st[sp - 1]; break;
        case AND: sp--; st[sp - 1] &= st[sp]; break;
        case OR: sp--; st[sp - 1] |= st[sp]; break;
        case XOR: sp--; st[sp - 1] ^= st[sp]; break;
        case SHL: sp--; st[sp - 1] <<= (st[sp] & 63); break;
        case SHR: sp--; st[sp - 1] = (i64)((unsigned long long)st[sp - 1] >> (st[sp] & 63)); break;
        case LOAD: st[sp - 1] = mem[st[sp - 1] & 15]; break;
        case STORE: sp -= 2; mem[st[sp + 1] & 15] = st[sp]; break;
        case INC: st[sp - 1]++; break;
        case DEC: st[sp - 1]--; break;
        case CALL: rs[rp++] = pc + 1; pc = code[pc]; break;
        case RET: if (rp == 0) return st[sp - 1]; pc = rs[--rp]; break;
        case HALT: return sp ? st[sp - 1] : -1;
        case NOP: break;
        default: return -2;
        }
        if (sp < 0 || sp > 60 || rp > 15) return -3;
    }
    return -4;  /* out of fuel */
}

static int emit_at;
static void e(int x) { code[emit_at++] = x; }

/* program 0 at 0: sum of i*i for i < arg; program 1 at 100: iterative fib(arg) mod 2^64 with a subroutine;
 * program 2 at 200: collatz steps of arg; program 3 at 300: a hash mixing all the operators */
NOINLINE void assemble(void) {
    emit_at = 0;                       /* [n] */
    e(PUSH); e(0); e(PUSH); e(0); e(STORE);        /* mem0 = 0 (acc) */
    int top = emit_at;                 /* [n] */
    e(DUP); e(JZ); int fix = emit_at; e(0);
    e(DEC); e(DUP); e(DUP); e(MUL); e(PUSH); e(0); e(LOAD); e(ADD); e(PUSH); e(0); e(STORE);
    e(JMP); e(top);
    code[fix] = emit_at; e(DROP); e(PUSH); e(0); e(LOAD); e(HALT);

    emit_at = 100;                     /* [n] ; a=0 (mem1), b=1 (mem2) */
    e(PUSH); e(0); e(PUSH); e(1); e(STORE); e(PUSH); e(1); e(PUSH); e(2); e(STORE);
    int t1 = emit_at;
    e(DUP); e(JZ); int f1 = emit_at; e(0);
    e(CALL); int c1 = emit_at; e(0); e(DEC); e(JMP); e(t1);
    code[f1] = emit_at; e(DROP); e(PUSH); e(1); e(LOAD); e(HALT);
    code[c1] = emit_at;                /* step: a, b = b, a + b */
    e(PUSH); e(1); e(LOAD); e(PUSH); e(2); e(LOAD); e(DUP); e(PUSH); e(1); e(STORE); e(ADD); e(PUSH); e(2);
    e(STORE); e(RET);

    emit_at = 200;                     /* [n] -> steps in mem3 */
    e(PUSH); e(0); e(PUSH); e(3); e(STORE);
    int t2 = emit_at;
    e(DUP); e(PUSH); e(1); e(EQ); e(JNZ); int f2 = emit_at; e(0);
    e(PUSH); e(3); e(LOAD); e(INC); e(PUSH); e(3); e(STORE);
    e(DUP); e(PUSH); e(1); e(AND); e(JZ); int even = emit_at; e(0);
    e(DUP); e(DUP); e(ADD); e(ADD); e(INC); e(JMP); e(t2);
    code[even] = emit_at; e(PUSH); e(1); e(SHR); e(JMP); e(t2);
    code[f2] = emit_at; e(PUSH); e(3); e(LOAD); e(HALT);

    emit_at = 300;                     /* [x] */
    e(DUP); e(PUSH); e(13); e(SHL); e(XOR); e(DUP); e(PUSH); e(7); e(SHR); e(XOR); e(DUP); e(PUSH); e(17);
    e(SHL); e(XOR); e(DUP); e(PUSH); e(1000); e(MOD); e(SWAP); e(PUSH); e(97); e(DIV); e(OVER); e(SUB);
    e(NEG); e(OR); e(PUSH); e(255); e(AND); e(DUP); e(PUSH); e(100); e(LT); e(ADD); e(NOP); e(HALT);
}

i64 interp(int prog, i64 arg, int fuel) {
    assemble();
    return run(prog * 100, arg, fuel);
}

/* an opcode the switch does not know */
i64 bad_opcode(void) {
    assemble();
    code[450] = 99;
    return run(450, 0, 10);
}
