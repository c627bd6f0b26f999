/* The client scenarios' assertions: a failed check prints where and why, and the scenario
 * returns 1 (each scenario is a function returning 0 on success). */
#ifndef GPUSHARDS_CLIENT_CHECK_H
#define GPUSHARDS_CLIENT_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                                                 \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                     \
            fprintf(stderr, __VA_ARGS__);                                                                \
            fprintf(stderr, "\n");                                                                       \
            return 1;                                                                                    \
        }                                                                                                \
    } while (0)
#define OK(call) CHECK((call) == CUDA_SUCCESS, "%s", #call)

#endif
