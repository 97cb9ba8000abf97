/* The pod sandbox ("pause") process of the local zonal cluster's real nodes: it holds the pod's
 * namespaces, reaps orphaned children (it is PID 1 of the pod) and exits on SIGTERM/SIGINT.
 * Built statically by e2e/cluster/images.sh; no image registry is reachable here. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_quit = {.sa_handler = quit}, on_child = {.sa_handler = reap};
    sigaction(SIGTERM, &on_quit, 0);
    sigaction(SIGINT, &on_quit, 0);
    on_child.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &on_child, 0);
    for (;;) pause();
    return 0;
}
