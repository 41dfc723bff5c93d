/* libFuzzer target: settings parsing. Each input line is one environment variable
 * ("NAME=value"; OUTBOX_ is prepended when missing) or, when it starts with "--", one
 * command-line argument. Parsing must never crash or leak, whatever the bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "relay/config.h"
#include "core/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096 || memmem(data, size, "_FILE", 5))
        return 0; /* _FILE reads a path: not this target's business */
    log_setup(LOG_ERROR + 1, LOG_FORMAT_TEXT);
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    char *env[64], *argv[64];
    int nenv = 0, argc = 1;
    argv[0] = "outbox-relay";
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line && nenv < 63 && argc < 63;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "--", 2) == 0) {
            argv[argc++] = line;
        } else {
            size_t n = strlen(line) + 8;
            char *var = malloc(n);
            snprintf(var, n, "%s%s", strncmp(line, "OUTBOX_", 7) ? "OUTBOX_" : "", line);
            env[nenv++] = var;
        }
    }
    env[nenv] = NULL;
    argv[argc] = NULL;
    struct config cfg;
    struct command cmd;
    char err[512];
    config_load(&cfg, &cmd, env, argc, argv, err, sizeof(err));
    config_destroy(&cfg);
    command_destroy(&cmd);
    for (int i = 0; i < nenv; i++)
        free(env[i]);
    free(text);
    return 0;
}
