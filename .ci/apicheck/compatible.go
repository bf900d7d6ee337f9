package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/packages"
)

// compatible compares each published module of repo with the same module in old, a checkout
// of an earlier release, by golang.org/x/exp/apidiff's rules, prints the changes, and fails
// if any is incompatible. A module the release did not have is new, and passes.
func compatible(old, repo string, stdout io.Writer) error {
	old, err := filepath.Abs(old)
	if err != nil {
		return err
	}
	repo, err = filepath.Abs(repo)
	if err != nil {
		return err
	}
	mods, err := apiModules(repo)
	if err != nil {
		return err
	}
	var broken []string
	for _, m := range mods {
		modPath, now, _, err := loadModule(repo, m)
		if err != nil {
			return fmt.Errorf("%s: %w", m.dir, err)
		}
		_, before, _, err := loadModule(old, m)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stdout, "%s: new since the release\n", modPath)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s of the release: %w", m.dir, err)
		}
		report := apidiff.ModuleChanges(apiModuleOf(modPath, before), apiModuleOf(modPath, now))
		incompatible := 0
		for _, c := range report.Changes {
			if !c.Compatible {
				incompatible++
			}
		}
		fmt.Fprintf(stdout, "%s: %d changes since the release, %d incompatible\n", modPath, len(report.Changes), incompatible)
		if incompatible > 0 {
			var b strings.Builder
			if err := report.TextIncompatible(&b, false); err != nil {
				return err
			}
			fmt.Fprint(stdout, b.String())
			broken = append(broken, modPath)
		}
	}
	if len(broken) > 0 {
		return fmt.Errorf("incompatible changes since the release in %s: each breaks a caller's code; "+
			"keep the old API, or make the release a major one (a minor before v1.0.0) and say so in CHANGELOG.md",
			strings.Join(broken, ", "))
	}
	return nil
}

func apiModuleOf(path string, pkgs []*packages.Package) *apidiff.Module {
	m := &apidiff.Module{Path: path}
	for _, p := range pkgs {
		m.Packages = append(m.Packages, p.Types)
	}
	return m
}
