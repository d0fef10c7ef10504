/* The sandbox ("pause") container of the cluster tier: registry.k8s.io/pause cannot be pulled here (no registry is
 * reachable), so tests/k8s/cluster.sh builds this static binary and imports it under that name. It does what the
 * upstream pause does (kubernetes build/pause/linux/pause.c): hold the pod's namespaces, reap the children it
 * inherits as PID 1, exit 0 on SIGINT/SIGTERM. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }

static void on_chld(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction term = {.sa_handler = on_term};
  struct sigaction chld = {.sa_handler = on_chld, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &term, NULL);
  sigaction(SIGTERM, &term, NULL);
  sigaction(SIGCHLD, &chld, NULL);
  for (;;) pause();
  return 1;
}
