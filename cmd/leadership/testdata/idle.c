/* idle N: starts N processes that sleep until this one dies, prints
   "ready", and sleeps: the process table of a busy host. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc != 2) return 2;
	pid_t parent = getpid();
	for (int i = atoi(argv[1]); i > 0; i--) {
		if (fork() == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent) _exit(0);
			pause();
			_exit(0);
		}
	}
	puts("ready");
	fflush(stdout);
	pause();
	return 0;
}
