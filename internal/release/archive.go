package release

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// archiveFile is one file of an archive: its name inside, where it is read
// from, and its mode.
type archiveFile struct {
	name, path string
	mode       int64
}

// writeArchive writes a tar.gz of files at the archive's top level, owned
// by root, every time stamp at stamp (the gzip header carries none), so
// the same files make the same bytes.
func writeArchive(out string, files []archiveFile, stamp time.Time) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	gz, err := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, af := range files {
		b, err := os.ReadFile(af.path)
		if err != nil {
			return fmt.Errorf("archive %s: %w", filepath.Base(out), err)
		}
		h := &tar.Header{Name: af.name, Mode: af.mode, Size: int64(len(b)), ModTime: stamp, Typeflag: tar.TypeReg, Format: tar.FormatPAX,
			Uname: "root", Gname: "root"}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// fileSHA256 is the hex SHA-256 of a file.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeSums writes name in dir: the SHA-256 of every other regular file at
// dir's top level, in sha256sum's format ("HEX  NAME"), sorted by name.
func writeSums(dir, name string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == name {
			continue
		}
		sum, err := fileSHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+e.Name())
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	return os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
