/* Build-time helper: turns schema/NNN_*.sql files into a C array so that the relay
 * binary carries its own migrations. Usage: embed_sql OUT.c FILE... (in order).
 * A file under a debezium/ folder is for the Debezium layout only; a file with the line
 * "-- @layout native" is for the native layout only; any other is for both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_NATIVE 1
#define SCHEMA_DEBEZIUM 2

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: embed_sql OUT.c FILE...\n");
        return 2;
    }
    FILE *out = fopen(argv[1], "w");
    if (!out) {
        perror(argv[1]);
        return 1;
    }
    fprintf(out, "/* Generated from schema/ by tools/embed_sql.c; do not edit. */\n"
                 "#include \"relay/schema.h\"\n\nconst struct schema_file schema_files[] = {\n");
    for (int i = 2; i < argc; i++) {
        FILE *in = fopen(argv[i], "r");
        if (!in) {
            perror(argv[i]);
            return 1;
        }
        const char *base = strrchr(argv[i], '/');
        base = base ? base + 1 : argv[i];
        int layouts = strstr(argv[i], "/debezium/") ? SCHEMA_DEBEZIUM : 0;
        char line[256];
        while (!layouts && fgets(line, sizeof(line), in))
            if (strncmp(line, "-- @layout native", 17) == 0)
                layouts = SCHEMA_NATIVE;
        rewind(in);
        if (!layouts)
            layouts = SCHEMA_NATIVE | SCHEMA_DEBEZIUM;
        fprintf(out, "    {%d, %d, \"%s\",\n     \"", atoi(base), layouts, base);
        int c;
        while ((c = fgetc(in)) != EOF) {
            if (c == '\n')
                fputs("\\n\"\n     \"", out);
            else if (c == '"' || c == '\\')
                fprintf(out, "\\%c", c);
            else
                fputc(c, out);
        }
        fputs("\"},\n", out);
        fclose(in);
    }
    fprintf(out, "};\nconst int schema_file_count = %d;\n", argc - 2);
    return fclose(out) == 0 ? 0 : 1;
}
