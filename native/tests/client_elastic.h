/* client_elastic.h — the scenarios of client_elastic.c. */
#ifndef GPUSHARDS_TEST_CLIENT_ELASTIC_H
#define GPUSHARDS_TEST_CLIENT_ELASTIC_H

/* The scenario's exit status, or -1 when s is not one of them. */
int elastic_scenario(const char *s, int argc, char **argv);

#endif
