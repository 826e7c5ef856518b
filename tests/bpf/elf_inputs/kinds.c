// Every BTF kind clang emits for BPF, and a bpf_loop callback (ld_imm64 of a function address).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct unknown;                                  /* FWD */
typedef unsigned int u32_t;                      /* TYPEDEF */
struct bits { unsigned a:3, b:5; int c; };       /* STRUCT with kind_flag (bitfields) */
union either { int i; float f; };                /* UNION, FLOAT */
enum small { S_NEG = -1, S_ONE = 1 };            /* ENUM, signed */
enum big { B_HUGE = 1ULL << 40 };                /* ENUM64 */
struct tagged { int x __attribute__((btf_decl_tag("member_tag"))); };  /* DECL_TAG on a member */

struct holder {
    struct unknown *fwd;
    struct bits bits;
    union either either;
    enum small small;
    enum big big;
    struct tagged tagged;
    int __attribute__((btf_type_tag("user"))) *tagged_ptr;   /* TYPE_TAG */
    int *restrict rp;                             /* RESTRICT */
    int (*fn)(int, u32_t);                        /* FUNC_PROTO through a pointer */
    const volatile u32_t cv;                      /* CONST, VOLATILE */
    char arr[3];                                  /* ARRAY */
};

struct holder h;
int counted;
static int calls_seen;                           /* static: relocated through the .bss section symbol */

static int step(__u32 i, void *ctx)
{
    counted += i;
    calls_seen++;
    return 0;
}

__attribute__((btf_decl_tag("entry")))
SEC("syscall")
int loop(void *ctx)
{
    bpf_loop(10, step, 0, 0);
    return h.bits.b + counted;
}

char LICENSE[] SEC("license") = "GPL";
