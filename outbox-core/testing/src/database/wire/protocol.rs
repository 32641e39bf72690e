//! Reading the frontend (client → server) message stream of PostgreSQL's
//! protocol 3.0.

use std::collections::HashMap;
use std::sync::Arc;

use super::label::{is_blank, label};
use super::{ExecutedStatement, Protocol, Recorder};

/// `SSLRequest`'s protocol code.
const SSL_REQUEST: u32 = 80_877_103;
/// `GSSENCRequest`'s protocol code.
const GSSENC_REQUEST: u32 = 80_877_104;
/// `CancelRequest`'s protocol code.
const CANCEL_REQUEST: u32 = 80_877_102;

/// What a startup-phase packet (no type byte) is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StartupKind {
    /// `SSLRequest` or `GSSENCRequest`: the server answers with one byte.
    EncryptionRequest,
    /// `CancelRequest`: nothing follows on this connection.
    Cancel,
    /// `StartupMessage`: typed messages follow.
    Startup,
}

impl StartupKind {
    /// `packet` starts with its 4-byte length, then the 4-byte code.
    pub(super) fn of(packet: &[u8]) -> Self {
        let code = packet
            .get(4..8)
            .map(|code| u32::from_be_bytes([code[0], code[1], code[2], code[3]]))
            .unwrap_or(0);
        match code {
            SSL_REQUEST | GSSENC_REQUEST => StartupKind::EncryptionRequest,
            CANCEL_REQUEST => StartupKind::Cancel,
            _ => StartupKind::Startup,
        }
    }
}

/// A prepared statement's SQL and label.
#[derive(Clone, Debug)]
struct Prepared {
    sql: Arc<str>,
    label: Arc<str>,
}

/// The stream could not be read as protocol messages.
#[derive(Debug)]
pub(super) struct Unreadable;

/// Reads typed messages (1 type byte, a 4-byte big-endian length that
/// counts itself, the body) as they arrive, keeping the connection's
/// prepared statements and portals.
#[derive(Default)]
pub(super) struct FrontendParser {
    pending: Vec<u8>,
    statements: HashMap<Vec<u8>, Prepared>,
    portals: HashMap<Vec<u8>, Prepared>,
    /// Whether a statement ran since the last round trip ended.
    executed: bool,
}

impl FrontendParser {
    /// Reads `bytes`, records every complete message.
    pub(super) fn feed(
        &mut self,
        bytes: &[u8],
        connection: u64,
        recorder: &Recorder,
    ) -> Result<(), Unreadable> {
        // Taken out, so that messages are read in place while `self` changes.
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend_from_slice(bytes);
        let mut start = 0;
        while pending.len() - start >= 5 {
            let header = &pending[start..start + 5];
            let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
            if length < 4 {
                return Err(Unreadable);
            }
            let end = start + 1 + length;
            if pending.len() < end {
                break;
            }
            self.message(
                pending[start],
                &pending[start + 5..end],
                connection,
                recorder,
            )?;
            start = end;
        }
        pending.drain(..start);
        self.pending = pending;
        Ok(())
    }

    fn message(
        &mut self,
        kind: u8,
        body: &[u8],
        connection: u64,
        recorder: &Recorder,
    ) -> Result<(), Unreadable> {
        match kind {
            // Query: the SQL text; ends a round trip.
            b'Q' => {
                let sql = cstr(body, 0)?.0;
                let sql = String::from_utf8_lossy(sql);
                let executed = !is_blank(&sql);
                if executed {
                    recorder.statement(ExecutedStatement {
                        connection,
                        label: label(&sql).into(),
                        sql: sql.into(),
                        protocol: Protocol::Simple,
                    });
                }
                recorder.round_trip(connection, executed || self.executed);
                self.executed = false;
            }
            // Parse: statement name, SQL, parameter types.
            b'P' => {
                let (name, next) = cstr(body, 0)?;
                let sql = String::from_utf8_lossy(cstr(body, next)?.0);
                recorder.prepared(connection);
                self.statements.insert(
                    name.to_vec(),
                    Prepared {
                        label: label(&sql).into(),
                        sql: sql.into(),
                    },
                );
            }
            // Bind: portal name, statement name, parameters.
            b'B' => {
                let (portal, next) = cstr(body, 0)?;
                let statement = cstr(body, next)?.0;
                let prepared = self.statements.get(statement).cloned().unwrap_or(Prepared {
                    sql: "".into(),
                    label: format!(
                        "(statement {:?} prepared before the proxy saw it)",
                        String::from_utf8_lossy(statement)
                    )
                    .into(),
                });
                self.portals.insert(portal.to_vec(), prepared);
            }
            // Execute: portal name, row limit.
            b'E' => {
                let portal = cstr(body, 0)?.0;
                let prepared = self.portals.get(portal).cloned().unwrap_or(Prepared {
                    sql: "".into(),
                    label: format!(
                        "(portal {:?} bound before the proxy saw it)",
                        String::from_utf8_lossy(portal)
                    )
                    .into(),
                });
                recorder.statement(ExecutedStatement {
                    connection,
                    label: prepared.label,
                    sql: prepared.sql,
                    protocol: Protocol::Extended,
                });
                self.executed = true;
            }
            // Close: 'S' statement or 'P' portal, name.
            b'C' => {
                let target = *body.first().ok_or(Unreadable)?;
                let name = cstr(body, 1)?.0;
                match target {
                    b'S' => self.statements.remove(name),
                    _ => self.portals.remove(name),
                };
            }
            // FunctionCall: a call by the function's oid, run at once.
            b'F' => {
                recorder.statement(ExecutedStatement {
                    connection,
                    label: "(FunctionCall)".into(),
                    sql: "".into(),
                    protocol: Protocol::Simple,
                });
                recorder.round_trip(connection, true);
                self.executed = false;
            }
            // Sync: the client waits for ReadyForQuery.
            b'S' => {
                recorder.round_trip(connection, self.executed);
                self.executed = false;
            }
            // Describe, Flush, Terminate, copy data, passwords: nothing to
            // count.
            _ => {}
        }
        Ok(())
    }
}

/// The NUL-terminated string at `start` of `body`, and where the next field
/// starts.
fn cstr(body: &[u8], start: usize) -> Result<(&[u8], usize), Unreadable> {
    let rest = body.get(start..).ok_or(Unreadable)?;
    let end = rest.iter().position(|&b| b == 0).ok_or(Unreadable)?;
    Ok((&rest[..end], start + end + 1))
}
