/* client_ipc.h — the scenarios of client_ipc.c. */
#ifndef GPUSHARDS_TEST_CLIENT_IPC_H
#define GPUSHARDS_TEST_CLIENT_IPC_H

/* The scenario's exit status, or -1 when s is not one of them. */
int ipc_scenario(const char *s, int argc, char **argv);

#endif
