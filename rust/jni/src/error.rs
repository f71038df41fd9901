//! Errors as Kotlin sees them: each pipeline error becomes a specific exception class carrying its fields as
//! data: the detail, the remedy and its argument (so that the Kotlin API and the Gradle task each word it), the
//! recorded nodes and the tensor it is about (so that the tape names the lines that recorded them, without
//! reading the message).

use jni::Env;
use jni::errors::ErrorPolicy;
use jni::objects::{JObject, JThrowable, JValue};
use jni::strings::JNIString;
use tapeout::graph::GraphError;
use tapeout::graph::io::IoError;
use tapeout::hlo::HloError;
use tapeout::irpa::IrpaError;
use tapeout::{Error, Remedy};

/// A failure to report to Kotlin.
#[derive(Debug)]
pub enum Failure {
    /// A JNI call failed (an exception may already be pending).
    Jni(jni::errors::Error),
    /// A tapeout error, mapped to a Kotlin exception class with its fields.
    Tapeout(Box<Thrown>),
}

/// The fields of a Kotlin `TapeoutException` (or of a `java.io.IOException`: class and message only).
#[derive(Debug)]
pub struct Thrown {
    /// JNI class name, e.g. `dev/tapeout/PackedConstantException`.
    pub class: &'static str,
    /// The message, without a remedy's wording.
    pub message: String,
    /// What the user can do, when a setting does it.
    pub remedy: Option<Remedy>,
    /// The recorded nodes the error is about, by index.
    pub nodes: Vec<u64>,
    /// The tensor the error is about (module path or name).
    pub tensor: Option<String>,
    /// The module function whose graph [`Self::nodes`] index, for an error in one function of several.
    pub function: Option<String>,
}

/// `dev.tapeout.GraphValidationException`.
pub const VALIDATION: &str = "dev/tapeout/GraphValidationException";
const IO: &str = "java/io/IOException";

impl Failure {
    /// A validation failure of the arguments Kotlin passed (a bug of the Kotlin side, worded for it).
    pub fn invalid(message: String) -> Self {
        Failure::Tapeout(Box::new(Thrown {
            class: VALIDATION,
            message,
            remedy: None,
            nodes: Vec::new(),
            tensor: None,
            function: None,
        }))
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Jni(e) => write!(f, "JNI error: {e}"),
            Failure::Tapeout(t) => f.write_str(&t.message),
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
        Failure::Tapeout(Box::new(Thrown {
            class: class_of(&e),
            remedy: e.remedy(),
            nodes: e.nodes(),
            tensor: e.tensor().map(str::to_owned),
            function: e.function().map(str::to_owned),
            message: e.to_string(),
        }))
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

/// The constructor every tapeout exception class has for the native side:
/// `(detail, remedyName, remedyBytes, nodes, tensor, function)`.
const NATIVE_CTOR: jni::signature::MethodSignature<'static, 'static> =
    jni::jni_sig!("(Ljava/lang/String;Ljava/lang/String;J[JLjava/lang/String;Ljava/lang/String;)V");

fn jlong(n: u64) -> jni::errors::Result<i64> {
    i64::try_from(n).map_err(|_| jni::errors::Error::JniCall(jni::errors::JniError::InvalidArguments))
}

/// Throws `class(detail, remedyName, remedyBytes, nodes, tensor, function)`: tapeout's exceptions take their fields as data.
fn throw_tapeout(env: &mut Env<'_>, t: Thrown) -> jni::errors::Result<()> {
    if t.class.starts_with("java/") {
        return env.throw_new(JNIString::from(t.class), JNIString::from(t.message));
    }
    let detail = env.new_string(t.message)?;
    let name: JObject<'_> = match t.remedy {
        Some(r) => env.new_string(r.name())?.into(),
        None => JObject::null(),
    };
    let bytes = jlong(t.remedy.map_or(0, Remedy::argument))?;
    let indices = t.nodes.iter().map(|&n| jlong(n)).collect::<jni::errors::Result<Vec<_>>>()?;
    let nodes = env.new_long_array(indices.len())?;
    nodes.set_region(env, 0, &indices)?;
    let tensor: JObject<'_> = match t.tensor {
        Some(k) => env.new_string(k)?.into(),
        None => JObject::null(),
    };
    let function: JObject<'_> = match t.function {
        Some(f) => env.new_string(f)?.into(),
        None => JObject::null(),
    };
    let obj = env.new_object(
        JNIString::from(t.class),
        NATIVE_CTOR,
        &[
            JValue::Object(&detail),
            JValue::Object(&name),
            JValue::Long(bytes),
            JValue::Object(&nodes),
            JValue::Object(&tensor),
            JValue::Object(&function),
        ],
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
            Failure::Tapeout(t) => throw_tapeout(env, *t),
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
