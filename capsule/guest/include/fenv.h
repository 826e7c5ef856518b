/* <fenv.h> for capsule guests: wasi-libc's, plus the names of the directed rounding modes.
 *
 * WebAssembly rounds every float operation to nearest, so wasi-libc defines FE_TONEAREST alone and programs that
 * name the other modes (QuickJS's number formatting does) do not compile. They are defined here with distinct
 * values so such programs build; fesetround() with any of them fails (returns nonzero, as C allows for a mode
 * that cannot be set) and the rounding stays to nearest. A program that relies on directed rounding therefore
 * rounds ties differently from a native build: QuickJS's (2.5).toFixed(0) is "2" here, "3" natively. */
#ifndef CAPSULE_FENV_H
#define CAPSULE_FENV_H

#include_next <fenv.h>

#ifndef FE_DOWNWARD
#define FE_DOWNWARD 0x400
#endif
#ifndef FE_UPWARD
#define FE_UPWARD 0x800
#endif
#ifndef FE_TOWARDZERO
#define FE_TOWARDZERO 0xc00
#endif

#endif
