package client

// A small WebSocket client (RFC 6455) on the standard library: the layout rules
// (internal/layout) keep client's imports to the standard library and api. The
// handshake goes through net/http (a 101 reply's body is the connection), so a
// refused upgrade gives the API's JSON error like any other call.

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// WebSocket opcodes.
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

const (
	wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
	// wsMaxMessage bounds one message read into memory.
	wsMaxMessage = 16 << 20
	// wsMaxFrame bounds one frame written (bigger writes are split into messages).
	wsMaxFrame = 64 << 10
)

// errProtocol is a WebSocket protocol violation by the server.
var errProtocol = errors.New("websocket protocol error")

// wsKey returns a fresh Sec-WebSocket-Key.
func wsKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.StdEncoding.EncodeToString(b[:])
}

// wsAccept is the Sec-WebSocket-Accept that answers key.
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// setUpgradeHeaders makes req a WebSocket upgrade request with key.
func setUpgradeHeaders(h http.Header, key string) {
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", "websocket")
	h.Set("Sec-WebSocket-Version", "13")
	h.Set("Sec-WebSocket-Key", key)
}

// checkUpgrade checks a 101 reply to an upgrade request with key.
func checkUpgrade(resp *http.Response, key string) error {
	switch {
	case resp.StatusCode != http.StatusSwitchingProtocols:
		return fmt.Errorf("%w: status %d, want 101", errProtocol, resp.StatusCode)
	case !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket"):
		return fmt.Errorf("%w: Upgrade header %q", errProtocol, resp.Header.Get("Upgrade"))
	case resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(key):
		return fmt.Errorf("%w: wrong Sec-WebSocket-Accept", errProtocol)
	case resp.Header.Get("Sec-WebSocket-Extensions") != "":
		return fmt.Errorf("%w: extensions %q were not asked for", errProtocol, resp.Header.Get("Sec-WebSocket-Extensions"))
	}
	if _, ok := resp.Body.(io.Writer); !ok {
		return fmt.Errorf("%w: the HTTP client's transport does not hand over upgraded connections", errProtocol)
	}
	return nil
}

// wsConn is the client side of a WebSocket connection: one reader (readMessage)
// and any number of writers (writeFrame serializes them).
type wsConn struct {
	rwc io.ReadWriteCloser
	br  *bufio.Reader

	wmu       sync.Mutex
	closeSent bool

	closeOnce sync.Once
}

func newWSConn(rwc io.ReadWriteCloser) *wsConn {
	return &wsConn{rwc: rwc, br: bufio.NewReaderSize(rwc, 32<<10)}
}

// writeFrame writes one final, masked frame.
func (c *wsConn) writeFrame(op byte, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return net.ErrClosed
	}
	if op == opClose {
		c.closeSent = true
	}
	n := len(payload)
	buf := make([]byte, 0, 14+n)
	buf = append(buf, 0x80|op)
	switch {
	case n <= 125:
		buf = append(buf, 0x80|byte(n))
	case n <= 0xFFFF:
		buf = append(buf, 0x80|126)
		buf = binary.BigEndian.AppendUint16(buf, uint16(n))
	default:
		buf = append(buf, 0x80|127)
		buf = binary.BigEndian.AppendUint64(buf, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	buf = append(buf, mask[:]...)
	start := len(buf)
	buf = append(buf, payload...)
	for i := range n {
		buf[start+i] ^= mask[i&3]
	}
	_, err := c.rwc.Write(buf)
	return err
}

// readFrame reads one frame.
func (c *wsConn) readFrame() (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return false, 0, nil, err
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0F
	if h[0]&0x70 != 0 {
		return false, 0, nil, fmt.Errorf("%w: reserved bits set", errProtocol)
	}
	masked := h[1]&0x80 != 0
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return false, 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return false, 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if op >= opClose && (n > 125 || !fin) {
		return false, 0, nil, fmt.Errorf("%w: bad control frame", errProtocol)
	}
	if n > wsMaxMessage {
		return false, 0, nil, fmt.Errorf("%w: frame of %d bytes (limit %d)", errProtocol, n, wsMaxMessage)
	}
	var mask [4]byte
	if masked { // servers must not mask, but unmasking costs nothing
		if _, err := io.ReadFull(c.br, mask[:]); err != nil {
			return false, 0, nil, err
		}
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(c.br, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return false, 0, nil, err
	}
	if masked {
		for i := range payload {
			payload[i] ^= mask[i&3]
		}
	}
	return fin, op, payload, nil
}

// readMessage reads the next text or binary message, answering pings and joining
// fragments. A close frame from the server is answered and gives io.EOF.
func (c *wsConn) readMessage() (op byte, data []byte, err error) {
	for {
		fin, fop, payload, err := c.readFrame()
		if err != nil {
			return 0, nil, err
		}
		switch fop {
		case opPing:
			if err := c.writeFrame(opPong, payload); err != nil && !errors.Is(err, net.ErrClosed) {
				return 0, nil, err
			}
			continue
		case opPong:
			continue
		case opClose:
			status := payload
			if len(status) > 2 {
				status = status[:2]
			}
			_ = c.writeFrame(opClose, status) // echo it; it may already be sent
			return 0, nil, io.EOF
		case opText, opBinary:
			if op != 0 {
				return 0, nil, fmt.Errorf("%w: new message inside a fragmented one", errProtocol)
			}
			op, data = fop, payload
		case opContinuation:
			if op == 0 {
				return 0, nil, fmt.Errorf("%w: continuation without a message", errProtocol)
			}
			if len(data)+len(payload) > wsMaxMessage {
				return 0, nil, fmt.Errorf("%w: message over %d bytes", errProtocol, wsMaxMessage)
			}
			data = append(data, payload...)
		default:
			return 0, nil, fmt.Errorf("%w: opcode %#x", errProtocol, fop)
		}
		if fin {
			return op, data, nil
		}
	}
}

// close sends a normal close frame (best effort) and closes the connection.
func (c *wsConn) close() error {
	var err error
	c.closeOnce.Do(func() {
		_ = c.writeFrame(opClose, []byte{0x03, 0xE8}) // 1000: normal closure
		err = c.rwc.Close()
	})
	return err
}
