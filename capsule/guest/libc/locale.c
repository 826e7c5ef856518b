/* setlocale(3) for capsule guests as glibc answers it (see ../include/locale.h).
 *
 * A guest has the locales "C" (also called "POSIX") and "C.UTF-8" (also "C.utf8"), the ones glibc has without
 * any installed: setlocale accepts those, "" (the environment's choice: LC_ALL, then LC_<category>, then LANG,
 * else "C"), and refuses every other name with NULL, as glibc does for a locale it lacks; wasi-libc's would
 * accept any name. The names are kept here, worded as glibc's, and the choice is also made in wasi-libc (which
 * knows C and C.UTF-8), so that what depends on it (MB_CUR_MAX, mbrtowc) follows. */
#define CAPSULE_WASI_SETLOCALE
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_LEN 16 /* the longest name accepted is "C.UTF-8" */

/* glibc's categories, in the order of its composite names; the last six are only named (wasi-libc has no
 * LC_PAPER & co.): they follow LC_ALL */
static const char *const CATEGORIES[] = {"LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY",
                                         "LC_MESSAGES", "LC_PAPER", "LC_NAME", "LC_ADDRESS", "LC_TELEPHONE",
                                         "LC_MEASUREMENT", "LC_IDENTIFICATION"};
#define NCAT (sizeof CATEGORIES / sizeof CATEGORIES[0])
static char names[NCAT][NAME_LEN] = {"C", "C", "C", "C", "C", "C", "C", "C", "C", "C", "C", "C"};
static char composite[NCAT * (NAME_LEN + 20)];

/* the name as glibc reports it, or NULL for a locale a guest does not have */
static const char *known(const char *name) {
    if (strcmp(name, "C") == 0 || strcmp(name, "POSIX") == 0)
        return "C";
    if (strcmp(name, "C.UTF-8") == 0 || strcmp(name, "C.utf8") == 0)
        return name;
    return NULL;
}

static const char *from_environment(int category) {
    const char *v = getenv("LC_ALL");
    if ((!v || !*v) && category != LC_ALL)
        v = getenv(CATEGORIES[category]);
    if (!v || !*v)
        v = getenv("LANG");
    return v && *v ? v : "C";
}

static const char *query(int category) {
    if (category != LC_ALL)
        return names[category];
    size_t i;
    for (i = 1; i < NCAT && strcmp(names[i], names[0]) == 0; i++)
        ;
    if (i == NCAT)
        return names[0];
    size_t n = 0;
    for (i = 0; i < NCAT; i++)
        n += (size_t)snprintf(composite + n, sizeof composite - n, "%s%s=%s", i ? ";" : "", CATEGORIES[i],
                              names[i]);
    return composite;
}

char *__capsule_setlocale(int category, const char *locale) {
    if (category < 0 || category > LC_ALL)
        return NULL;
    if (locale == NULL)
        return (char *)query(category);
    const char *name = known(*locale ? locale : from_environment(category));
    if (name == NULL || setlocale(category, name) == NULL)
        return NULL;
    if (category == LC_ALL) {
        for (size_t i = 0; i < NCAT; i++)
            strcpy(names[i], name);
    } else {
        strcpy(names[category], name);
    }
    return (char *)query(category);
}
