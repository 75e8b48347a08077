/* relay FILE SECONDS: a fork relay in a session of its own that ignores
   SIGTERM: each process forks the next and exits at once, and each writes
   "PID NANOS" (CLOCK_REALTIME) over the start of FILE. It gives up after
   SECONDS, so that a test that fails leaves nothing running for long. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc != 3) return 2;
	int fd = open(argv[1], O_WRONLY | O_CREAT, 0644);
	long long end = (long long)time(NULL) + atoll(argv[2]);
	setsid();
	signal(SIGTERM, SIG_IGN);
	for (;;) {
		pid_t p = fork();
		if (p > 0) _exit(0);
		if (p < 0) continue;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		if (ts.tv_sec > end) _exit(0);
		char buf[48];
		int n = snprintf(buf, sizeof buf, "%10d %20lld\n", getpid(), (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
		pwrite(fd, buf, n, 0);
	}
}
