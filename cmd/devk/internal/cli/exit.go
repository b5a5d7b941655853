package cli

// Exit statuses, as the root's help documents them.
const (
	// ExitFailure is the exit status of a command that failed.
	ExitFailure = 1
	// ExitExpiring is check-expiration's status when --fail-within finds
	// a certificate expiring sooner (or missing); digest verify's
	// mismatch (digest.MismatchError) is the same.
	ExitExpiring = 2
	// ExitInterrupted is the exit status after Ctrl-C (SIGINT or
	// SIGTERM), as shells report a command killed by SIGINT.
	ExitInterrupted = 130
)

// ExitCoder is an error that asks for a specific exit status.
type ExitCoder interface {
	error
	ExitCode() int
}
