/* doom_headless.c: capsule's platform layer for doomgeneric (the portable DOOM engine): no window, no sound and
 * no clock of its own, so that a run depends on nothing but the WAD, the arguments and an input script, and a
 * native build and a capsule build of the same sources draw the same frames.
 *
 *     doom -iwad freedoom1.wad [DOOM's options] [-capsule-frames N] [-capsule-input FILE] [-capsule-dump FILE]
 *
 *   -capsule-frames N   end the game (exit status 0) once N frames are drawn
 *   -capsule-input FILE key events: lines "FRAME +KEY" (pressed) or "FRAME -KEY" (released), delivered before
 *                       frame FRAME is drawn (frames count from 1); KEY is up, down, left, right, fire, use,
 *                       strafe_left, strafe_right, enter, escape, tab, shift, alt, a single character, or a
 *                       number (DOOM's key code). '#' starts a comment.
 *   -capsule-dump FILE  append every frame's pixels to FILE (WIDTH*HEIGHT XRGB8888 words, row by row)
 *
 * Time is virtual: the clock doomgeneric reads is a millisecond counter that only its sleeps advance, so DOOM's loop,
 * which sleeps until its next 1/35 s tic is due, runs exactly one tic per frame, at any speed of the machine.
 * Under capsule every frame ends with capsule_yield(): the host finds the frame through the exported
 * capsule_doom() (struct capsule_doom below), shows or hashes it, and resumes the guest for the next tic, so
 * one invocation of the program is one game tick and its frame.
 *
 * doomgeneric's i_video.c calls `int I_InitInput(void)` while i_input.c defines `void I_InitInput(void)`;
 * wasm-ld turns a call through a mismatched signature into a trap, so capsule.sources.doom compiles i_video.c
 * with -DI_InitInput=capsule_doom_init_input and the function below makes the call with the right type. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doomgeneric.h"
#include "doomkeys.h"

#if defined(__wasm__)
#include "capsule.h"
#define DOOM_EXPORT(name) __attribute__((export_name(name), used))
#endif

#define DOOM_WIDTH 320
#define DOOM_HEIGHT 200
#define MAX_EVENTS 4096
#define CAPSULE_DOOM_MAGIC 0x4d4f4f44u /* "DOOM" */
#define CAPSULE_DOOM_VERSION 1u

/* What the host reads after each frame (capsule/demo/doom.py mirrors it). */
struct capsule_doom {
    uint32_t magic;   /*  0 CAPSULE_DOOM_MAGIC */
    uint32_t version; /*  4 CAPSULE_DOOM_VERSION */
    uint32_t width;   /*  8 */
    uint32_t height;  /* 12 */
    uint32_t pixels;  /* 16 address of the frame: width*height XRGB8888 words */
    uint32_t frame;   /* 20 frames drawn so far */
    uint32_t now_ms;  /* 24 the virtual clock */
};

static struct capsule_doom shared = {CAPSULE_DOOM_MAGIC, CAPSULE_DOOM_VERSION, DOOM_WIDTH, DOOM_HEIGHT, 0, 0, 0};

#if defined(__wasm__)
DOOM_EXPORT("capsule_doom") uint32_t capsule_doom(void) { return (uint32_t)(uintptr_t)&shared; }
#endif

static struct {
    uint32_t frame;
    uint8_t pressed, key;
} events[MAX_EVENTS];
static unsigned n_events, next_event;
static uint32_t frame_limit;
static FILE *dump;

void I_InitInput(void);
int capsule_doom_init_input(void) {
    I_InitInput();
    return 0;
}

static const struct {
    const char *name;
    unsigned char key;
} key_names[] = {
    {"up", KEY_UPARROW},          {"down", KEY_DOWNARROW},       {"left", KEY_LEFTARROW},
    {"right", KEY_RIGHTARROW},    {"fire", KEY_FIRE},            {"use", KEY_USE},
    {"strafe_left", KEY_STRAFE_L}, {"strafe_right", KEY_STRAFE_R}, {"enter", KEY_ENTER},
    {"escape", KEY_ESCAPE},       {"tab", KEY_TAB},              {"shift", KEY_RSHIFT},
    {"alt", KEY_RALT},
};

static int key_code(const char *name) {
    for (size_t i = 0; i < sizeof key_names / sizeof key_names[0]; i++)
        if (strcmp(name, key_names[i].name) == 0)
            return key_names[i].key;
    if (name[0] && !name[1])
        return (unsigned char)name[0];
    char *end;
    long v = strtol(name, &end, 0);
    return *name && !*end && v > 0 && v < 256 ? (int)v : -1;
}

static void read_script(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "doom: -capsule-input %s: cannot open it\n", path);
        exit(2);
    }
    char line[256];
    for (unsigned lineno = 1; fgets(line, sizeof line, f); lineno++) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        unsigned frame;
        char sign, name[64];
        int fields = sscanf(line, " %u %c%63s", &frame, &sign, name);
        if (fields <= 0)
            continue;
        int key = fields == 3 && (sign == '+' || sign == '-') ? key_code(name) : -1;
        if (key < 0 || n_events == MAX_EVENTS) {
            fprintf(stderr, "doom: %s:%u: expected \"FRAME +KEY\" or \"FRAME -KEY\"\n", path, lineno);
            exit(2);
        }
        events[n_events].frame = frame;
        events[n_events].pressed = sign == '+';
        events[n_events].key = (uint8_t)key;
        n_events++;
    }
    fclose(f);
}

static void draw_frame(void) {
    shared.pixels = (uint32_t)(uintptr_t)DG_ScreenBuffer;
    shared.frame++;
    if (dump)
        fwrite(DG_ScreenBuffer, 4, (size_t)DOOM_WIDTH * DOOM_HEIGHT, dump);
#if defined(__wasm__)
    capsule_yield(); /* the host takes the frame */
#endif
    if (frame_limit && shared.frame >= frame_limit) {
        if (dump)
            fclose(dump);
        exit(0);
    }
}

static void sleep_ms(uint32_t ms) { shared.now_ms += ms; }

static uint32_t ticks_ms(void) { return shared.now_ms; }

/* Events due before the next frame (frames drawn so far + 1), in script order. */
static int get_key(int *pressed, unsigned char *key) {
    if (next_event < n_events && events[next_event].frame <= shared.frame + 1) {
        *pressed = events[next_event].pressed;
        *key = events[next_event].key;
        next_event++;
        return 1;
    }
    return 0;
}

static void set_window_title(const char *title) { (void)title; }

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "-capsule-frames") == 0)
            frame_limit = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "-capsule-input") == 0)
            read_script(argv[i + 1]);
        else if (strcmp(argv[i], "-capsule-dump") == 0 && !(dump = fopen(argv[i + 1], "wb"))) {
            fprintf(stderr, "doom: -capsule-dump %s: cannot create it\n", argv[i + 1]);
            return 2;
        }
    }
    dg_Create(DOOM_WIDTH, DOOM_HEIGHT, draw_frame, sleep_ms, ticks_ms, get_key, set_window_title);
    return dg_main(argc, argv); /* D_DoomMain loops until -capsule-frames ends the game */
}
