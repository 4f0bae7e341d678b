//! Email delivery through the configured SMTP server (lettre, async, pooled connections).

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Mailbox, Mailboxes};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::config::SmtpConfig;
use crate::domain::alert::SmtpTls;

const SMTP_TIMEOUT: Duration = Duration::from_secs(10);

/// The SMTP transport and the sender, built once at start-up (connections are made on use).
#[derive(Clone)]
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    server: String,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer")
            .field("server", &self.server)
            .field("from", &self.from.to_string())
            .finish_non_exhaustive()
    }
}

impl Mailer {
    /// # Errors
    /// A sender that is not a mailbox, or TLS parameters that cannot be built for the host.
    pub fn new(config: &SmtpConfig) -> Result<Self, String> {
        let from: Mailbox = config
            .from
            .parse()
            .map_err(|e| format!("smtp_from `{}` is not a mailbox: {e}", config.from))?;
        let builder = match config.tls {
            SmtpTls::None => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&config.host),
            SmtpTls::Starttls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&config.host)
                .map_err(|e| format!("STARTTLS to {}: {e}", config.host))?,
            SmtpTls::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&config.host)
                .map_err(|e| format!("TLS to {}: {e}", config.host))?,
        };
        let mut builder = builder.port(config.port).timeout(Some(SMTP_TIMEOUT));
        if let (Some(user), Some(password)) = (&config.username, &config.password) {
            builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
        }
        Ok(Self {
            transport: builder.build(),
            from,
            server: format!("{}:{} ({})", config.host, config.port, config.tls),
        })
    }

    /// Sends one plain-text mail to the comma-separated `recipients`.
    ///
    /// # Errors
    /// A line fit for `last_error`: bad recipients, or the SMTP server's refusal or silence.
    pub async fn send(&self, recipients: &str, subject: &str, body: &str) -> Result<(), String> {
        let to: Mailboxes = recipients
            .parse()
            .map_err(|e| format!("recipients `{recipients}`: {e}"))?;
        let mut builder = Message::builder()
            .from(self.from.clone())
            .subject(subject)
            .header(ContentType::TEXT_PLAIN);
        for mailbox in to {
            builder = builder.to(mailbox);
        }
        let message = builder
            .body(body.to_owned())
            .map_err(|e| format!("building the email: {e}"))?;
        let send = self.transport.send(message);
        match tokio::time::timeout(SMTP_TIMEOUT * 3, send).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("SMTP {}: {e}", self.server)),
            Err(_) => Err(format!(
                "SMTP {}: no answer within {}s",
                self.server,
                SMTP_TIMEOUT.as_secs() * 3
            )),
        }
    }
}
