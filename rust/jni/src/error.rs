//! Errors as Kotlin sees them: each pipeline error becomes a specific exception class, with its remedy
//! passed as data (`TapeoutException.remedy`) so that the Kotlin API and the Gradle task each word it.

use jni::Env;
use jni::errors::ErrorPolicy;
use jni::objects::{JObject, JThrowable, JValue};
use jni::strings::JNIString;
use tapeout::graph::GraphError;
use tapeout::graph::io::IoError;
use tapeout::hlo::HloError;
use tapeout::irpa::IrpaError;
use tapeout::{Error, Remedy};

/// A failure to report to Kotlin: the exception class, its message and the remedy.
#[derive(Debug)]
pub enum Failure {
    /// A JNI call failed (an exception may already be pending).
    Jni(jni::errors::Error),
    /// A tapeout error, mapped to a Kotlin exception class.
    Tapeout {
        /// JNI class name, e.g. `dev/tapeout/PackedConstantException`.
        class: &'static str,
        /// The message, without a remedy's wording.
        message: String,
        /// What the user can do, when a setting does it.
        remedy: Option<Remedy>,
    },
}

/// `dev.tapeout.GraphValidationException`.
pub const VALIDATION: &str = "dev/tapeout/GraphValidationException";
const IO: &str = "java/io/IOException";

impl Failure {
    /// A validation failure of the arguments Kotlin passed (a bug of the Kotlin side, worded for it).
    pub fn invalid(message: String) -> Self {
        Failure::Tapeout { class: VALIDATION, message, remedy: None }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Jni(e) => write!(f, "JNI error: {e}"),
            Failure::Tapeout { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for Failure {}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Self {
        Failure::Jni(e)
    }
}

fn class_of(e: &Error) -> &'static str {
    match e {
        Error::InFunction { source, .. } => class_of(source),
        Error::Graph(GraphError::PackedConstant { .. }) => "dev/tapeout/PackedConstantException",
        Error::Emit(HloError::ConstantTooLarge { .. }) => "dev/tapeout/ConstantTooLargeException",
        Error::Emit(HloError::Output(_)) | Error::Write { .. } | Error::Read(IoError::Io { .. }) => IO,
        Error::Archive(IrpaError::Format { .. } | IrpaError::KeyNotFound { .. }) => "dev/tapeout/IrpaFormatException",
        Error::Archive(IrpaError::Io { .. }) => IO,
        Error::Archive(_) => "dev/tapeout/TapeoutException",
        _ => VALIDATION,
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Tapeout { class: class_of(&e), remedy: e.remedy(), message: e.to_string() }
    }
}

macro_rules! via_pipeline {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Self {
                Failure::from(Error::from(e))
            }
        }
    )*};
}
via_pipeline!(GraphError, HloError, IrpaError, IoError);

/// The remedy's name and size argument as the Kotlin `Remedy` enum takes them.
fn remedy_args(remedy: Option<Remedy>) -> (Option<&'static str>, i64) {
    match remedy {
        Some(Remedy::Dequantize) => (Some("DEQUANTIZE"), 0),
        Some(Remedy::ExternalAtOrBelow { bytes }) => {
            (Some("EXTERNAL_PARAMETER"), i64::try_from(bytes).unwrap_or(i64::MAX))
        }
        Some(Remedy::DeclareOutputs) => (Some("DECLARE_OUTPUTS"), 0),
        _ => (None, 0),
    }
}

/// Throws `class(detail, remedyName, remedyBytes)`: tapeout's exceptions take the remedy as data.
fn throw_tapeout(
    env: &mut Env<'_>,
    class: &'static str,
    message: String,
    remedy: Option<Remedy>,
) -> jni::errors::Result<()> {
    if class.starts_with("java/") {
        return env.throw_new(JNIString::from(class), JNIString::from(message));
    }
    let (name, bytes) = remedy_args(remedy);
    let detail = env.new_string(message)?;
    let name: JObject<'_> = match name {
        Some(n) => env.new_string(n)?.into(),
        None => JObject::null(),
    };
    let obj = env.new_object(
        JNIString::from(class),
        jni::jni_sig!("(Ljava/lang/String;Ljava/lang/String;J)V"),
        &[JValue::Object(&detail), JValue::Object(&name), JValue::Long(bytes)],
    )?;
    let throwable = JThrowable::cast_local(env, obj)?;
    env.throw(throwable)
}

/// Throws the mapped exception for an error, a `RuntimeException` with the message for a panic.
pub struct ThrowMapped;

impl<T: Default> ErrorPolicy<T, Failure> for ThrowMapped {
    type Captures<'unowned_env_local: 'native_method, 'native_method> = ();

    fn on_error<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        err: Failure,
    ) -> jni::errors::Result<T> {
        if env.exception_check() {
            return Ok(T::default()); // a Java exception is already on its way
        }
        let thrown = match err {
            Failure::Tapeout { class, message, remedy } => throw_tapeout(env, class, message, remedy),
            Failure::Jni(e) => env.throw_new(
                JNIString::from("java/lang/RuntimeException"),
                JNIString::from(format!("tapeout: JNI call failed: {e}")),
            ),
        };
        if thrown.is_err() && !env.exception_check() {
            let _ = env.throw_new(
                JNIString::from("java/lang/RuntimeException"),
                JNIString::from("tapeout: could not throw the exception for a native error"),
            );
        }
        Ok(T::default())
    }

    fn on_panic<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        payload: Box<dyn std::any::Any + Send + 'static>,
    ) -> jni::errors::Result<T> {
        let message = match payload.downcast::<String>() {
            Ok(s) => *s,
            Err(payload) => {
                payload.downcast::<&'static str>().map_or_else(|_| "unknown panic".to_owned(), |s| (*s).to_owned())
            }
        };
        let _ = env.throw_new(
            JNIString::from("java/lang/RuntimeException"),
            JNIString::from(format!("tapeout native panic: {message}")),
        );
        Ok(T::default())
    }
}
