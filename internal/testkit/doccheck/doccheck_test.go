package doccheck_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/dbflag/leadership/internal/testkit/doccheck"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const module = "github.com/dbflag/leadership"

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := doccheck.Root(".", module)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestEveryRelativeLinkAndAnchorResolves walks every tracked Markdown file
// of the repository.
func TestEveryRelativeLinkAndAnchorResolves(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	files, err := doccheck.MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d Markdown files (%v): the walk is broken", len(files), files)
	}
	problems, err := doccheck.Links(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// write creates the files of a fixture repository.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestABrokenLinkOrAnchorIsFound(t *testing.T) {
	t.Parallel()
	dir := write(t, map[string]string{
		"README.md": "# Top\n\n## Two words\n\n" +
			"[ok](docs/a.md) [ok](docs/a.md#the-api--once) [ok](#two-words) [ok](docs/) [ok](https://example.com/x#y)\n" +
			"![ok](docs/pic.svg) [ok](<docs/a b.md>) [ok](docs/a%20b.md) `[not a link](nowhere.md)`\n" +
			"[missing file](docs/nope.md)\n" +
			"[missing anchor](docs/a.md#nothing-here)\n" +
			"[missing here](#three-words)\n" +
			"<img src=\"docs/gone.png\">\n" +
			"[ref]: docs/gone.md\n" +
			"```sh\n[in code](nowhere.md)\n```\n",
		"docs/a.md":    "# The `API` — once\n\n[up](../README.md#top) [out](../../x.md)\n",
		"docs/a b.md":  "text\n",
		"docs/pic.svg": "<svg/>\n",
	})
	files, err := doccheck.MarkdownFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := doccheck.Links(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		`README.md:7: link "docs/nope.md": docs/nope.md does not exist`,
		`README.md:8: link "docs/a.md#nothing-here": docs/a.md has no heading with the anchor #nothing-here`,
		`README.md:9: link "#three-words": README.md has no heading with the anchor #three-words`,
		`README.md:10: link "docs/gone.png": docs/gone.png does not exist`,
		`README.md:11: link "docs/gone.md": docs/gone.md does not exist`,
		`docs/a.md:3: link "../../x.md" leaves the repository`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestADriftedGoBlockIsFound(t *testing.T) {
	t.Parallel()
	dir := write(t, map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.26\n",
		"README.md": "# M\n\n```go\nflag, err := leadership.NewFlag().\n\tStore(store).Build(ctx)   // aligned differently\n```\n\n" +
			"```go\nflag, err := leadership.NewFlag().\n\tStore(store).Name(\"x\").Build(ctx) // the API moved on\n```\n\n" +
			"```sh\nnot go\n```\n",
		"m_test.go":        "package m_test\n\nfunc Example() {\n\tflag, err := leadership.NewFlag().\n\t\tStore(store).Build(ctx) // aligned differently\n\t_ = err\n}\n",
		"nested/go.mod":    "module example.com/n\n",
		"nested/n_test.go": "package n\n\nfunc Example() {\n\tflag, err := leadership.NewFlag().\n\t\tStore(store).Name(\"x\").Build(ctx) // the API moved on\n}\n",
	})
	problems, err := doccheck.GoBlocks(dir, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].Line != 8 || !strings.Contains(problems[0].Msg, "closest: m_test.go: Example, which has its first 1 line(s)") {
		t.Errorf("problems = %v, want one at README.md:8 naming m_test.go: Example as the closest", problems)
	}
}

// TestSlugFollowsGitHub: anchors as github.com renders them.
func TestSlugFollowsGitHub(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Guarantees, in plain words":             "guarantees-in-plain-words",
		"1. Crash failover":                      "1-crash-failover",
		"4. `Raised()` cost":                     "4-raised-cost",
		"What `status` and `release` print":      "what-status-and-release-print",
		"PostgreSQL behind a pooler (PgBouncer)": "postgresql-behind-a-pooler-pgbouncer",
		"The trust window — and why":             "the-trust-window--and-why",
		"`leadership_flags` and snake_case":      "leadership_flags-and-snake_case",
		"[Linked](x.md) heading":                 "linked-heading",
		"MySQL: a follower of four processes":    "mysql-a-follower-of-four-processes",
		"Ümlaut 2×":                              "ümlaut-2",
	} {
		if got := doccheck.Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestEveryGoBlockOfTheReadmeIsHeldByAnExample: the README's Go code is
// code an Example function holds, so `go vet` and `go test` compile it.
func TestEveryGoBlockOfTheReadmeIsHeldByAnExample(t *testing.T) {
	t.Parallel()
	problems, err := doccheck.GoBlocks(repoRoot(t), "README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
