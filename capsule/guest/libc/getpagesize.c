/* getpagesize(3) for capsule guests: the page of the guest's memory is the wasm page (sysconf agrees). */
#include <unistd.h>

int getpagesize(void) { return (int)sysconf(_SC_PAGESIZE); }
