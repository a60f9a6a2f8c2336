#include "core/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace agoq {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
// Two notes: stop_signals_note writes the one the handler is not reading, then switches, so a signal never meets a
// half-written note.
char g_note[2][640];
size_t g_note_len[2] = {0, 0};
volatile sig_atomic_t g_note_at = 0;

void on_stop_signal(int sig) {  // async-signal-safe: a flag, a write, and the default action for a second signal
  if (g_stop_signal != 0) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_stop_signal = sig;
  const int at = g_note_at;
  if (g_note_len[at]) (void)!write(STDERR_FILENO, g_note[at], g_note_len[at]);
}

}  // namespace

void stop_signals_note(const char* note) {
  const int next = 1 - g_note_at;
  g_note_len[next] = std::min(std::strlen(note), sizeof g_note[next] - 1);
  std::memcpy(g_note[next], note, g_note_len[next]);
  g_note_at = next;
}

void stop_signals_install(const char* note) {
  stop_signals_note(note);
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
