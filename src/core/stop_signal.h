// Pre-emption: schedulers send SIGTERM (SLURM, Kubernetes) or SIGUSR1 (SLURM's --signal, forwarded by mpirun)
// before they kill a job, and people press Ctrl-C (SIGINT). After stop_signals_install() the first of these only
// records that a stop was asked for, so a long run can finish its step, save and exit; a second one ends the process
// at once (the signal's default action).
#pragma once

namespace agoq {

// `note` (copied; at most ~600 bytes) is written to stderr when the first signal arrives. Process-wide.
void stop_signals_install(const char* note);
// Replaces the note (e.g. with the newest good checkpoint); safe while a signal may arrive.
void stop_signals_note(const char* note);
// 0 until a stop signal arrives, then its number.
int stop_signal_received();
// "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
const char* stop_signal_name(int sig);

}  // namespace agoq
