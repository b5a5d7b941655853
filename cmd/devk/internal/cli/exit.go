package cli

// Exit statuses, as the root's help documents them.
const (
	// ExitFailure is the exit status of a command that failed.
	ExitFailure = 1
	// ExitExpiring is check-expiration's status when --fail-within finds
	// a certificate expiring sooner (or missing); digest verify's
	// mismatch (digest.MismatchError) is the same.
	ExitExpiring = 2
	// ExitExecFailed is `devk node exec`'s status when devk itself fails
	// (no cluster, no such node, bad arguments), apart from the statuses
	// of the command it runs, as env's, chroot's and `docker run`'s 125.
	ExitExecFailed = 125
	// ExitCannotExecute is `devk node exec`'s status for a command found
	// in the node but not executable, as a shell's.
	ExitCannotExecute = 126
	// ExitCommandNotFound is `devk node exec`'s status for a command not
	// found in the node, as a shell's.
	ExitCommandNotFound = 127
	// ExitInterrupted is the exit status after Ctrl-C (SIGINT or
	// SIGTERM), as shells report a command killed by SIGINT.
	ExitInterrupted = 130
)

// ExitCoder is an error that asks for a specific exit status.
type ExitCoder interface {
	error
	ExitCode() int
}
