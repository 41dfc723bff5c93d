/* Between config.c and config_check.c: the value checks the settings table names (each
 * returns 0, or -1 with what is wrong in err). Not for other modules. */
#ifndef OUTBOX_CONFIG_INT_H
#define OUTBOX_CONFIG_INT_H

#include <stddef.h>

#include "relay/config.h"

int config_check_log_level(const char *v, char *err, size_t errlen);
int config_check_log_format(const char *v, char *err, size_t errlen);
int config_check_dsn(const char *v, char *err, size_t errlen);
int config_check_topic_allow(const char *v, char *err, size_t errlen);
int config_check_channel(const char *v, char *err, size_t errlen);
int config_check_duration(const char *v, char *err, size_t errlen);
int config_check_policy(const char *v, char *err, size_t errlen);
int config_check_on_sent(const char *v, char *err, size_t errlen);
int config_check_layout(const char *v, char *err, size_t errlen);
int config_check_sink(const char *v, char *err, size_t errlen);
int config_check_rabbitmq_url(const char *v, char *err, size_t errlen);
int config_check_rabbitmq_exchange(const char *v, char *err, size_t errlen);
int config_check_placement(const char *v, char *err, size_t errlen);
int config_check_ce_source(const char *v, char *err, size_t errlen);
int config_check_content_type(const char *v, char *err, size_t errlen);
int config_check_payload_type(const char *v, char *err, size_t errlen);
int config_check_optional_topic(const char *v, char *err, size_t errlen);
int config_check_http_addr(const char *v, char *err, size_t errlen);
int config_check_relay_name(const char *v, char *err, size_t errlen);

#endif
