package integration

import (
	"bufio"
	"os"
	"os/exec"
	"testing"
)

// startHelper runs this test binary again as a helper process: the test named test only, with
// env (NAME=value) added to its environment. Each line it prints goes to onLine, in order, from
// one goroutine; exited receives what Wait returned once its output has ended.
func startHelper(t *testing.T, test, env string, onLine func(line string)) (cmd *exec.Cmd, exited <-chan error) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			onLine(lines.Text())
		}
		done <- cmd.Wait()
	}()
	return cmd, done
}
