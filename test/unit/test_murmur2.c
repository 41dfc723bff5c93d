/* Unit tests: the test suite's independent murmur2 against Kafka's published vectors. */
#include "../tools/murmur2.h"
#include "tap.h"

int main(void)
{
    static const struct {
        const char *key;
        int32_t want;
    } vectors[] = {
        {"21", -973932308},
        {"foobar", -790332482},
        {"a-little-bit-long-string", -985981536},
        {"a-little-bit-longer-string", -1486304829},
        {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
        {"abc", 479470107},
    };
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++)
        is_int((int32_t)kafka_murmur2(vectors[i].key, strlen(vectors[i].key)), vectors[i].want,
               "murmur2(%s)", vectors[i].key);
    return done();
}
