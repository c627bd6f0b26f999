/* client_compute.h — the scenarios of client_compute.c. */
#ifndef GPUSHARDS_TEST_CLIENT_COMPUTE_H
#define GPUSHARDS_TEST_CLIENT_COMPUTE_H

/* The scenario's exit status, or -1 when s is not one of them. */
int compute_scenario(const char *s, int argc, char **argv);

#endif
