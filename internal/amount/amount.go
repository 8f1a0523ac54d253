// Package amount reads the amount a call spends against a budget from the
// call's input: an integer field of a protobuf request message, named by
// its dotted path of field names ("refund.amount_cents"), or an integer of
// a JSON body, named by a JSON Pointer (RFC 6901, "/refund/amountCents").
// The engine validates paths at start-up (CheckProto, CheckPointer) and
// reads them at stage 2e from the same decoded input the digest binds,
// once the digest has accepted it.
package amount

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// ErrAmount wraps every reason an input has no amount to spend: missing,
// negative, not an integer, beyond int64.
var ErrAmount = errors.New("no amount to spend")

func refuse(path, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", ErrAmount, path, fmt.Sprintf(format, args...))
}

// integerKinds are the protobuf field kinds an amount may have.
var integerKinds = map[protoreflect.Kind]bool{
	protoreflect.Int32Kind: true, protoreflect.Sint32Kind: true, protoreflect.Sfixed32Kind: true,
	protoreflect.Int64Kind: true, protoreflect.Sint64Kind: true, protoreflect.Sfixed64Kind: true,
	protoreflect.Uint32Kind: true, protoreflect.Fixed32Kind: true,
	protoreflect.Uint64Kind: true, protoreflect.Fixed64Kind: true,
}

// CheckProto reports why path does not name a singular integer field of
// md, through singular message fields: nil when it does.
func CheckProto(md protoreflect.MessageDescriptor, path string) error {
	segments := strings.Split(path, ".")
	for i, name := range segments {
		fd := md.Fields().ByName(protoreflect.Name(name))
		switch {
		case fd == nil:
			return fmt.Errorf("%s has no field %q (name fields as the .proto file does, dot-separated)", md.FullName(), name)
		case fd.IsList() || fd.IsMap():
			return fmt.Errorf("field %s is repeated: an amount is one integer", fd.FullName())
		case i < len(segments)-1:
			if fd.Message() == nil {
				return fmt.Errorf("field %s is not a message, so %q goes nowhere", fd.FullName(), strings.Join(segments[i+1:], "."))
			}
			md = fd.Message()
		case !integerKinds[fd.Kind()]:
			return fmt.Errorf("field %s is %s, not an integer", fd.FullName(), fd.Kind())
		}
	}
	return nil
}

// Proto reads the integer at path (checked with CheckProto) in m. A field
// inside an unset message, or an unset field with explicit presence
// (proto3 optional, proto2), is missing; an unset field without presence
// is 0, as the protojson rendering the digest binds reads back.
func Proto(m protoreflect.Message, path string) (int64, error) {
	segments := strings.Split(path, ".")
	for i, name := range segments {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil || fd.IsList() || fd.IsMap() {
			return 0, refuse(path, "is not a field of %s", m.Descriptor().FullName())
		}
		if i < len(segments)-1 {
			if fd.Message() == nil || !m.Has(fd) {
				return 0, refuse(path, "is missing")
			}
			m = m.Get(fd).Message()
			continue
		}
		if fd.HasPresence() && !m.Has(fd) {
			return 0, refuse(path, "is missing")
		}
		v := m.Get(fd)
		switch fd.Kind() {
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			return int64(v.Uint()), nil
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			if u := v.Uint(); u > 1<<63-1 {
				return 0, refuse(path, "is %d, beyond int64", u)
			}
			return int64(v.Uint()), nil
		}
		if !integerKinds[fd.Kind()] {
			return 0, refuse(path, "is %s, not an integer", fd.Kind())
		}
		if n := v.Int(); n < 0 {
			return 0, refuse(path, "is negative (%d)", n)
		}
		return v.Int(), nil
	}
	return 0, refuse(path, "is empty")
}

// CheckPointer reports why p is not a JSON Pointer (RFC 6901) to a
// member or element: nil when it is. The empty pointer (the whole
// document) is refused: the document is never the amount.
func CheckPointer(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q is not a JSON Pointer: it starts with \"/\", like \"/amount\"", p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return fmt.Errorf("JSON Pointer %q: \"~\" is written \"~0\", \"/\" inside a name \"~1\"", p)
		}
	}
	return nil
}

// tokens splits a pointer (checked with CheckPointer) into its unescaped
// reference tokens.
func tokens(p string) []string {
	parts := strings.Split(p[1:], "/")
	for i, t := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return parts
}

// JSON reads the integer the pointer p names in doc, a document the digest
// has accepted (I-JSON: no duplicate names, so p names one value). The
// integer may be written in any JSON form of an integer (450, 4.5e2,
// 450.0); a fraction, a string, or a value beyond int64 is refused.
func JSON(doc []byte, p string) (int64, error) {
	if err := CheckPointer(p); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrAmount, err)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	for _, t := range tokens(p) {
		found, err := descend(dec, t)
		if err != nil {
			return 0, refuse(p, "cannot be read: %v", err)
		}
		if !found {
			return 0, refuse(p, "is missing")
		}
	}
	tok, err := dec.Token()
	if err != nil {
		return 0, refuse(p, "cannot be read: %v", err)
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, refuse(p, "is %s, not an integer", kind(tok))
	}
	return integer(p, string(n))
}

// descend moves dec from the start of a value into its member or element
// t, reporting false when the value has none.
func descend(dec *json.Decoder, t string) (bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				return false, err
			}
			if name == t {
				return true, nil
			}
			if err := skip(dec); err != nil {
				return false, err
			}
		}
		return false, nil
	case json.Delim('['):
		index, err := strconv.Atoi(t)
		if err != nil || index < 0 || (len(t) > 1 && t[0] == '0') {
			return false, nil // not an array index: there is no such element
		}
		for i := 0; dec.More(); i++ {
			if i == index {
				return true, nil
			}
			if err := skip(dec); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	return false, nil // a scalar has no members
}

func skip(dec *json.Decoder) error {
	var v json.RawMessage
	err := dec.Decode(&v)
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// integer reads a JSON number as a non-negative int64.
func integer(p, s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return 0, refuse(p, "is negative (%d)", n)
		}
		return n, nil
	}
	// A magnitude a double tells is far past int64 needs no exact look
	// (and an exponent of millions would make one costly).
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case f < 0:
		return 0, refuse(p, "is negative (%s)", s)
	case f >= 1<<64: // +Inf too
		return 0, refuse(p, "is %s, beyond int64", s)
	case err != nil: // underflow: a nonzero number closer to 0 than any double
		return 0, refuse(p, "is %s, not an integer", s)
	}
	r, ok := new(big.Rat).SetString(s)
	switch {
	case !ok:
		return 0, refuse(p, "is %s, not an integer", s)
	case !r.IsInt():
		return 0, refuse(p, "is %s, not an integer", s)
	case r.Sign() < 0:
		return 0, refuse(p, "is negative (%s)", s)
	case !r.Num().IsInt64():
		return 0, refuse(p, "is %s, beyond int64", s)
	}
	return r.Num().Int64(), nil
}

// kind names what a JSON token is, for refusals.
func kind(tok json.Token) string {
	switch tok.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	case json.Delim:
		return "an object or array"
	}
	return fmt.Sprintf("%v", tok)
}
