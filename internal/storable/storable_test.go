package storable_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentsafe/agentsafe/internal/storable"
)

func TestText(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		max      int
		want     string
		marks    []string
	}{
		{"clean text is kept as it is", `a \ b "ü"`, 64, `a \ b "ü"`, nil},
		{"a NUL byte is escaped, and a backslash with it", "a\x00b\\c", 64, `a\x00b\\c`, []string{"f:escaped"}},
		{"a byte that is not UTF-8 is escaped", "7\xfe\xffé", 64, `7\xfe\xffé`, []string{"f:escaped"}},
		{"a cut UTF-8 sequence is escaped byte by byte", "é\xc3", 64, `é\xc3`, []string{"f:escaped"}},
		{"an oversize field is cut at a character boundary", "abcé", 4, "abc", []string{"f:truncated"}},
		{"at its limit a field is kept", "abcé", 5, "abcé", nil},
		{"an escaped field is cut at an escape boundary", "ab\x00cd", 5, "ab", []string{"f:escaped", "f:truncated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m storable.Marks
			got := m.Text("f", tc.in, tc.max)
			if got != tc.want || !slices.Equal(m, tc.marks) {
				t.Errorf("Text(%q, %d) = %q, marks %q; want %q, %q", tc.in, tc.max, got, m, tc.want, tc.marks)
			}
		})
	}
}

func TestMarksString(t *testing.T) {
	var m storable.Marks
	if m.String() != "" {
		t.Errorf("no marks: %q", m.String())
	}
	m.Text("error", "\x00", 64)
	m.Text("stack", strings.Repeat("x", 10), 4)
	if got, want := m.String(), "error:escaped,stack:truncated"; got != want {
		t.Errorf("marks %q, want %q", got, want)
	}
}

func TestCleanTextAllocatesNothing(t *testing.T) {
	s := strings.Repeat("a clean error ", 20)
	var m storable.Marks
	if n := testing.AllocsPerRun(100, func() { m.Text("error", s, storable.TextMax) }); n != 0 {
		t.Errorf("a field that needs no change costs %v allocations, want 0", n)
	}
}

// FuzzText: whatever the input, the result is valid UTF-8 without NUL
// bytes, within its limit, marked when changed, and an escaped result
// gives back the input's bytes (a prefix of them when cut).
func FuzzText(f *testing.F) {
	for _, s := range []string{"", "plain", "a\x00b", "\xff\xfe\\", "é\xc3", `\x00`} {
		f.Add(s, 8)
	}
	f.Fuzz(func(t *testing.T, in string, max int) {
		if max < 4 || max > 1<<12 {
			return
		}
		var m storable.Marks
		out := m.Text("f", in, max)
		if !utf8.ValidString(out) || strings.IndexByte(out, 0) >= 0 || len(out) > max {
			t.Fatalf("Text(%q, %d) = %q: not storable", in, max, out)
		}
		escaped, cut := slices.Contains(m, "f:escaped"), slices.Contains(m, "f:truncated")
		original := out
		if escaped {
			original = unescape(t, out)
		}
		switch {
		case !escaped && !cut && out != in:
			t.Fatalf("Text(%q) = %q without a mark", in, out)
		case cut && !strings.HasPrefix(in, original), !cut && original != in:
			t.Fatalf("Text(%q, %d) = %q (marks %q) does not give back the input", in, max, out, m)
		}
	})
}

// unescape undoes the escapes the package doc describes.
func unescape(t *testing.T, s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case i+1 < len(s) && s[i+1] == '\\':
			b.WriteByte('\\')
			i++
		case i+3 < len(s) && s[i+1] == 'x':
			v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
			if err != nil {
				t.Fatalf("bad escape in %q: %v", s, err)
			}
			b.WriteByte(byte(v))
			i += 3
		default:
			t.Fatalf("a lone backslash in escaped %q", s)
		}
	}
	return b.String()
}
