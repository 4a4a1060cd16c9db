package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"
)

// render prints v in the session's format: JSON (indented), YAML (with the
// JSON field names), or the table that table writes followed by the lines
// each of after writes (notes outside the table's columns).
func (s *session) render(v any, table func(w io.Writer) error, after ...func(w io.Writer) error) error {
	switch s.format {
	case FormatJSON:
		enc := json.NewEncoder(s.out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("writing JSON: %w", err)
		}
		return nil
	case FormatYAML:
		return writeYAML(s.out, v)
	}
	tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	if err := table(tw); err != nil {
		return err
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	for _, f := range after {
		if err := f(s.out); err != nil {
			return err
		}
	}
	return nil
}

// writeYAML prints v as YAML with the keys of its JSON form.
func writeYAML(w io.Writer, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding YAML: %w", err)
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return fmt.Errorf("encoding YAML: %w", err)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(numbersToYAML(generic)); err != nil {
		return fmt.Errorf("writing YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("writing YAML: %w", err)
	}
	return nil
}

// numbersToYAML replaces json.Number values with int64 or float64, which
// yaml encodes as plain numbers.
func numbersToYAML(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbersToYAML(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbersToYAML(e)
		}
	}
	return v
}

// row writes one tab-separated table row.
func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
		// One line per row: a multi-line value (user.meta-data, a cloud-init
		// document) shows its line breaks as \n; `config get` prints it raw.
		cells[i] = strings.NewReplacer("\t", " ", "\r", `\r`, "\n", `\n`).Replace(cells[i])
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// timeCell formats an optional time for tables.
func timeCell(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.Local().Format(time.DateTime)
}
