/* client_nvml.h — the scenarios of client_nvml.c. */
#ifndef GPUSHARDS_TEST_CLIENT_NVML_H
#define GPUSHARDS_TEST_CLIENT_NVML_H

#include "api.h"

/* The scenario's exit status, or -1 when s is not one of them. */
int nvml_scenario(const struct api *A, const char *s, int argc, char **argv);

#endif
