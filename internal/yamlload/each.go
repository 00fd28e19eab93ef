package yamlload

import "errors"

// Each returns the errors of list joined, one per line, without the
// wrapping error's prefix ("policy: invalid:"); err itself when list is
// empty (an error that is not about the file's content). It prints what
// Collect found: Each(err, policy.Errors(err)).
func Each[E error](err error, list []E) error {
	if len(list) == 0 {
		return err
	}
	errs := make([]error, len(list))
	for i, e := range list {
		errs[i] = e
	}
	return errors.Join(errs...)
}
