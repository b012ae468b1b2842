/* Logging: one macro, level checked first; each line carries time, rank and level.
 * Any thread of any rank may log. INFO and DEBUG lines are printed by rank 0 only
 * unless log_init() is asked to show all ranks. */
#ifndef TPD_LOG_H
#define TPD_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

extern int log_min_level;

void log_init(int rank, enum log_level level, int all_ranks);
int log_parse_level(const char *s, enum log_level *out);
void log_write(enum log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define LOG(level, ...) \
    do { \
        if ((level) >= log_min_level) log_write((level), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

#endif
