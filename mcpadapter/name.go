package mcpadapter

import (
	"fmt"
	"strings"
	"unicode"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxToolName is the longest tool name MCP allows.
const maxToolName = 128

// toolName is the name a procedure is listed under: the capability's
// ToolName when set, else the method name in snake case.
func toolName(md protoreflect.MethodDescriptor, override string) string {
	if override != "" {
		return override
	}
	return snakeCase(string(md.Name()))
}

// snakeCase turns a protobuf method name into snake case, the way tool
// names are usually written: "RefundOrder" is "refund_order",
// "GetHTTPStatus" "get_http_status", "V2Report" "v2_report".
func snakeCase(s string) string {
	var b strings.Builder
	runes := []rune(s)
	for i, r := range runes {
		if r == '_' {
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "_") {
				b.WriteByte('_')
			}
			continue
		}
		if unicode.IsUpper(r) && i > 0 && b.Len() > 0 && !strings.HasSuffix(b.String(), "_") {
			prev := runes[i-1]
			nextLower := i+1 < len(runes) && unicode.IsLower(runes[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return strings.TrimSuffix(b.String(), "_")
}

// checkToolName reports why name is not a valid MCP tool name: 1 to 128
// characters from [A-Za-z0-9_.-].
func checkToolName(name string) error {
	if name == "" {
		return fmt.Errorf("tool name is empty")
	}
	if len(name) > maxToolName {
		return fmt.Errorf("tool name %q is longer than %d characters", name, maxToolName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("tool name %q has the character %q; MCP tool names use only A-Z, a-z, 0-9, '_', '-' and '.'", name, r)
		}
	}
	return nil
}
