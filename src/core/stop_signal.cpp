#include "core/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstring>

namespace agoq {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
char g_note[256];
size_t g_note_len = 0;

void on_stop_signal(int sig) {  // async-signal-safe: a flag, a write, and the default action for a second signal
  if (g_stop_signal != 0) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_stop_signal = sig;
  if (g_note_len) (void)!write(STDERR_FILENO, g_note, g_note_len);
}

}  // namespace

void stop_signals_install(const char* note) {
  g_note_len = std::min(std::strlen(note), sizeof g_note - 1);
  std::memcpy(g_note, note, g_note_len);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;  // reads and writes in progress go on instead of failing with EINTR
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

int stop_signal_received() { return g_stop_signal; }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: {
      static thread_local char buf[24];
      std::snprintf(buf, sizeof buf, "signal %d", sig);
      return buf;
    }
  }
}

}  // namespace agoq
