/* client_cap.h — the scenarios of client_cap.c. */
#ifndef GPUSHARDS_TEST_CLIENT_CAP_H
#define GPUSHARDS_TEST_CLIENT_CAP_H

#include "api.h"

/* The scenario's exit status, or -1 when s is not one of them. */
int cap_scenario(const struct api *A, const char *s, int argc, char **argv);

#endif
