// Package doccheck checks the repository's Markdown, for a test in CI:
// every relative link and #anchor resolves ([Links]), and every Go code
// block of the README is code that an Example function holds, so that it
// compiles and cannot drift from the API ([GoBlocks]).
//
// Anchors follow GitHub's rules: the heading's text, lowercased, without
// punctuation but hyphens and underscores, each space a hyphen, and "-1",
// "-2", … after repeats; an HTML element's id or name counts too.
package doccheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Problem is one broken link or stray code block.
type Problem struct {
	File string // slash-separated, relative to the root
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// MarkdownFiles lists the *.md files of the repository at root, as git
// tracks them (every file on disk when git cannot say), outside testdata
// directories, which hold data rather than documents.
func MarkdownFiles(root string) ([]string, error) {
	var files []string
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--", "*.md").Output()
	if err == nil {
		for f := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
	} else {
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
				rel, _ := filepath.Rel(root, p)
				files = append(files, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	files = slices.DeleteFunc(files, func(f string) bool {
		return slices.Contains(strings.Split(f, "/"), "testdata")
	})
	slices.Sort(files)
	return files, nil
}

// doc is a parsed Markdown file: its anchors, links and fenced code.
type doc struct {
	anchors map[string]bool
	links   []link
	blocks  []block
}

type link struct {
	line   int
	target string
}

type block struct {
	line int    // of the opening fence
	info string // the word after the fence
	code string
}

var (
	fenceRE   = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})\\s*([^`\\s]*)")
	atxRE     = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextRE  = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	codeRE    = regexp.MustCompile("(`+)(.+?)(`+)")
	linkRE    = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+"[^"]*")?\s*\)`)
	refDefRE  = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	htmlRefRE = regexp.MustCompile(`(?i)<(?:a|img|source)\b[^>]*?\b(?:href|src)\s*=\s*"([^"]*)"`)
	htmlIDRE  = regexp.MustCompile(`(?i)<[a-z][^>]*?\b(?:id|name)\s*=\s*"([^"]*)"`)
	tagRE     = regexp.MustCompile(`<[^>]+>`)
)

// parse reads a Markdown document well enough for links and anchors:
// fenced code is skipped (and kept), code spans hide what they contain,
// and headings give GitHub's anchors.
func parse(src []byte) doc {
	d := doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	addHeading := func(text string) {
		s := Slug(text)
		if n := seen[s]; n > 0 {
			d.anchors[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			d.anchors[s] = true
		}
		seen[s]++
	}
	lines := strings.Split(string(src), "\n")
	var fence string // the open fence's marker, "" outside code
	var cur *block
	var code []string
	prevText := "" // the previous line when it could be a setext heading's text
	for i, raw := range lines {
		ln := strings.TrimRight(raw, "\r")
		if fence != "" {
			if m := fenceRE.FindStringSubmatch(ln); m != nil && m[1][0] == fence[0] && len(m[1]) >= len(fence) && strings.TrimSpace(ln[strings.Index(ln, m[1])+len(m[1]):]) == "" {
				cur.code = strings.Join(code, "\n")
				d.blocks = append(d.blocks, *cur)
				fence, cur, code = "", nil, nil
				continue
			}
			code = append(code, ln)
			continue
		}
		if m := fenceRE.FindStringSubmatch(ln); m != nil && (m[1][0] == '~' || !strings.Contains(ln[strings.Index(ln, m[1])+len(m[1]):], "`")) {
			fence, cur, code, prevText = m[1], &block{line: i + 1, info: m[2]}, nil, ""
			continue
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(ln, -1) {
			d.anchors[m[1]] = true
		}
		if m := atxRE.FindStringSubmatch(ln); m != nil {
			addHeading(m[2])
			prevText = ""
		} else if setextRE.MatchString(ln) && prevText != "" {
			addHeading(prevText)
			prevText = ""
			continue
		}
		if t := strings.TrimSpace(ln); t != "" && !strings.HasPrefix(t, "|") && !strings.HasPrefix(t, "- ") && !strings.HasPrefix(t, "* ") && !strings.HasPrefix(t, ">") && atxRE.FindStringSubmatch(ln) == nil {
			prevText = t
		} else {
			prevText = ""
		}
		if m := refDefRE.FindStringSubmatch(ln); m != nil {
			d.links = append(d.links, link{i + 1, m[1]})
			continue
		}
		text := codeRE.ReplaceAllStringFunc(ln, func(s string) string {
			m := codeRE.FindStringSubmatch(s)
			if len(m[1]) != len(m[3]) {
				return s
			}
			return strings.Repeat(" ", len(s)) // a code span holds no link
		})
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			d.links = append(d.links, link{i + 1, strings.Trim(m[2], "<>")})
		}
		for _, m := range htmlRefRE.FindAllStringSubmatch(text, -1) {
			d.links = append(d.links, link{i + 1, m[1]})
		}
	}
	return d
}

// Slug is the anchor GitHub gives a heading (before "-1" for a repeat).
func Slug(heading string) string {
	t := linkRE.ReplaceAllString(heading, "$1") // a link shows its text
	t = tagRE.ReplaceAllString(t, "")
	t = strings.ToLower(t)
	var b strings.Builder
	for _, r := range t {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Links checks every link of the given Markdown files (relative to root)
// that is not a URL with a scheme: the file or directory it names exists
// under root, and an #anchor into a Markdown file is one of its headings.
func Links(root string, files []string) ([]Problem, error) {
	docs := map[string]doc{}
	get := func(f string) (doc, error) {
		if d, ok := docs[f]; ok {
			return d, nil
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return doc{}, err
		}
		docs[f] = parse(src)
		return docs[f], nil
	}
	var problems []Problem
	for _, f := range files {
		d, err := get(f)
		if err != nil {
			return nil, err
		}
		for _, l := range d.links {
			if msg := check(root, f, l.target, get); msg != "" {
				problems = append(problems, Problem{f, l.line, msg})
			}
		}
	}
	return problems, nil
}

var schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// check returns what is wrong with target, a link in file from, or "".
func check(root, from, target string, get func(string) (doc, error)) string {
	if target == "" {
		return "empty link"
	}
	if schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // a URL: not checked here
	}
	p, anchor, _ := strings.Cut(target, "#")
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	p, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("link %q: %v", target, err)
	}
	file := from
	if p != "" {
		if strings.HasPrefix(p, "/") {
			file = path.Clean(strings.TrimPrefix(p, "/"))
		} else {
			file = path.Join(path.Dir(from), p)
		}
		if file == ".." || strings.HasPrefix(file, "../") {
			return fmt.Sprintf("link %q leaves the repository", target)
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(file))); err != nil {
			return fmt.Sprintf("link %q: %s does not exist", target, file)
		}
	}
	if anchor == "" || !strings.HasSuffix(strings.ToLower(file), ".md") {
		return ""
	}
	d, err := get(file)
	if err != nil {
		return fmt.Sprintf("link %q: %v", target, err)
	}
	if a, err := url.PathUnescape(anchor); err == nil && d.anchors[a] {
		return ""
	}
	return fmt.Sprintf("link %q: %s has no heading with the anchor #%s", target, file, anchor)
}

// GoBlocks checks that each ```go block of the Markdown file md (relative
// to root) is held, line by line with whitespace collapsed, by the body of
// an Example function in a _test.go file of the Go module at root (nested
// modules excluded, as `go test ./...` at root does not compile them).
func GoBlocks(root, md string) ([]Problem, error) {
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(md)))
	if err != nil {
		return nil, err
	}
	bodies, err := ExampleBodies(root)
	if err != nil {
		return nil, err
	}
	var problems []Problem
	for _, b := range parse(src).blocks {
		if b.info != "go" {
			continue
		}
		want := normalize(b.code)
		if len(want) == 0 {
			problems = append(problems, Problem{md, b.line, "empty ```go block"})
			continue
		}
		found, best, bestName, bestAt := false, -1, "", ""
		for _, e := range bodies {
			if at := index(e.lines, want); at >= 0 {
				found = true
				break
			}
			if n, at := longestPrefix(e.lines, want); n > best {
				best, bestName, bestAt = n, e.name, at
			}
		}
		if found {
			continue
		}
		msg := "this ```go block is held by no Example function of a _test.go file"
		if best > 0 {
			msg += fmt.Sprintf("; closest: %s, which has its first %d line(s) but then %q where the block has %q", bestName, best, bestAt, want[best])
		}
		problems = append(problems, Problem{md, b.line, msg})
	}
	return problems, nil
}

// Example is the body of one Example function, normalized.
type Example struct {
	name  string // file: function
	lines []string
}

// ExampleBodies reads every Example function of the _test.go files of the
// module at root.
func ExampleBodies(root string) ([]Example, error) {
	var out []Example
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root {
				if d.Name() == ".git" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			body := src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset]
			out = append(out, Example{filepath.ToSlash(rel) + ": " + fn.Name.Name, normalize(string(body))})
		}
		return nil
	})
	return out, err
}

// normalize gives the non-empty lines of code with their whitespace
// collapsed to single spaces.
func normalize(code string) []string {
	var out []string
	for ln := range strings.SplitSeq(code, "\n") {
		if f := strings.Fields(ln); len(f) > 0 {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

// index returns where want starts as a run of lines in have, or -1.
func index(have, want []string) int {
	for i := 0; i+len(want) <= len(have); i++ {
		if slices.Equal(have[i:i+len(want)], want) {
			return i
		}
	}
	return -1
}

// longestPrefix returns how many leading lines of want appear as a run in
// have at best, and the line of have that follows that run there.
func longestPrefix(have, want []string) (int, string) {
	best, next := 0, ""
	for i := range have {
		n := 0
		for n < len(want) && i+n < len(have) && have[i+n] == want[n] {
			n++
		}
		if n > best && n < len(want) {
			best, next = n, "(end of the function)"
			if i+n < len(have) {
				next = have[i+n]
			}
		}
	}
	return best, next
}

// Root returns the directory of the go.mod of module, found upward from
// dir.
func Root(dir, module string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module "+module+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", module)
		}
		dir = parent
	}
}
