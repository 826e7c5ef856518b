// extern variables: __kconfig values (virtual LINUX_* ones, config options of several C types, a weak missing
// one) and typeless __ksym ones (present, weak missing), copied into .bss by a SYSCALL program.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>


extern unsigned int LINUX_KERNEL_VERSION __kconfig;
extern _Bool LINUX_HAS_BPF_COOKIE __kconfig;
extern int CONFIG_HZ __kconfig;
extern _Bool CONFIG_BPF_SYSCALL __kconfig;
extern enum libbpf_tristate CONFIG_BPF_JIT __kconfig;
extern char CONFIG_LOCALVERSION[16] __kconfig __weak;
extern enum libbpf_tristate CONFIG_CAPSULE_NO_SUCH_OPTION __kconfig __weak;

extern const void __start_BTF __ksym;
extern const void capsule_no_such_symbol __ksym __weak;

unsigned int version;
_Bool cookie, bpf_syscall;
int hz;
enum libbpf_tristate jit, missing;
char localversion[16];
__u64 start_btf, no_such_symbol;

SEC("syscall")
int externs(void *ctx)
{
    version = LINUX_KERNEL_VERSION;
    cookie = LINUX_HAS_BPF_COOKIE;
    hz = CONFIG_HZ;
    bpf_syscall = CONFIG_BPF_SYSCALL;
    jit = CONFIG_BPF_JIT;
    missing = CONFIG_CAPSULE_NO_SUCH_OPTION;
    __builtin_memcpy(localversion, CONFIG_LOCALVERSION, sizeof(localversion));
    start_btf = (__u64)&__start_BTF;
    no_such_symbol = (__u64)&capsule_no_such_symbol;
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
