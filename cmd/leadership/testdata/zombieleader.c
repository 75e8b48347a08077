/* zombieleader FILE: ignores SIGTERM, starts a thread that appends
   "PID NANOS" (CLOCK_REALTIME) to FILE every 10 ms, and ends its main
   thread with SYS_exit: /proc/PID/stat then says Z while the thread runs. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void *beat(void *path) {
	for (;;) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		FILE *f = fopen(path, "a");
		if (f) {
			fprintf(f, "%d %lld\n", getpid(), (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
			fclose(f);
		}
		usleep(10000);
	}
	return NULL;
}

int main(int argc, char **argv) {
	pthread_t t;
	if (argc != 2) return 2;
	signal(SIGTERM, SIG_IGN);
	if (pthread_create(&t, NULL, beat, argv[1]) != 0) return 1;
	syscall(SYS_exit, 0);
	return 0;
}
