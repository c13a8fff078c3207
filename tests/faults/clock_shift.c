/* Shift this process's wall clock by the whole seconds written in $CLOCK_SHIFT_FILE, re-read
 * at every call: tests/faults/clock_tools.py (MovableClock) moves a running redis-server's
 * clock with it. libfaketime 0.9.10 cannot: its clock_gettime recurses through jemalloc's and
 * redis-server never starts. CLOCK_REALTIME and gettimeofday only: the monotonic clocks, which
 * Redis times its own work with, keep their pace. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long shift_seconds(void) {
  const char *path = getenv("CLOCK_SHIFT_FILE");
  char text[32] = {0};
  if (!path) return 0;
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  return n > 0 ? strtoll(text, NULL, 10) : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  static int (*real)(clockid_t, struct timespec *);
  if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
  int rc = real(id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += shift_seconds();
  return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
  static int (*real)(struct timeval *, void *);
  if (!real) real = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
  int rc = real(tv, tz);
  if (rc == 0 && tv) tv->tv_sec += shift_seconds();
  return rc;
}

time_t time(time_t *out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}
