// The narrow C surface tapeout's Rust crate binds (by hand, in src/ffi.rs) instead of IREE's whole runtime API.
//
// Every fallible function returns 0 on success or an IREE status code, and then sets *out_message to a string
// from malloc that the caller frees with tio_free_message. Handles are opaque and released by their own function.
#ifndef TAPEOUT_IREE_H_
#define TAPEOUT_IREE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tio_instance tio_instance;
typedef struct tio_device tio_device;
typedef struct tio_session tio_session;
// A value lives on the device (an iree_hal_buffer_view_t).
typedef struct tio_value tio_value;

// Element types cross this surface as IREE's own iree_hal_element_type_t values (numerical type << 24 | bits): the
// one table that names them is the Rust crate's DType (src/signature.rs), which the JNI contract renders for Kotlin.

// The step of tio_session_create that failed (its *out_phase), so that errors are typed by what failed rather than
// by IREE's message text.
enum {
  TIO_PHASE_NONE = 0,
  // Reading the compiled module's bytes (header, FlatBuffer verification, types).
  TIO_PHASE_MODULE = 1,
  // Making the VM context or the HAL module over the device.
  TIO_PHASE_CONTEXT = 2,
  // Opening, mapping or indexing parameter file *out_file.
  TIO_PHASE_PARAMETERS = 3,
  // Registering the module: its initializers run, resolving parameters and loading its executables on the device.
  TIO_PHASE_INITIALIZE = 4,
};

void tio_free_message(char* message);

int32_t tio_instance_create(tio_instance** out_instance, char** out_message);
void tio_instance_release(tio_instance* instance);
// The HAL drivers this runtime was built with, one name per line (a string to free with tio_free_message).
int32_t tio_instance_drivers(tio_instance* instance, char** out_names, char** out_message);

// uri: "local-task", "local-sync", "cuda", "vulkan", ... ; workers > 0 caps local-task's worker threads.
int32_t tio_device_create(tio_instance* instance, const char* uri, int32_t workers, tio_device** out_device,
                          char** out_message);
void tio_device_release(tio_device* device);

// Loads a compiled module (its bytes are copied) with parameter files: file i under scopes[i] ("" for none).
// Each parameter file is memory-mapped read-only and its entries are imported in place where the device can.
// On failure *out_phase says which step failed (TIO_PHASE_*) and, for TIO_PHASE_PARAMETERS, *out_file which file;
// everything the call took is freed.
int32_t tio_session_create(tio_instance* instance, tio_device* device, const uint8_t* vmfb, size_t vmfb_length,
                           size_t file_count, const char* const* scopes, const char* const* paths,
                           tio_session** out_session, int32_t* out_phase, size_t* out_file, char** out_message);
void tio_session_release(tio_session* session);
// The exported functions: "name\tdeclaration\n" per function (a string to free with tio_free_message).
int32_t tio_session_functions(tio_session* session, char** out_listing, char** out_message);

// A device value of IREE element type `element_type` from host bytes (copied); dims has `rank` entries.
int32_t tio_value_create(tio_session* session, uint32_t element_type, size_t rank, const int64_t* dims, const void* data,
                         size_t byte_length, tio_value** out_value, char** out_message);
void tio_value_release(tio_value* value);
// The value's IREE element type (iree_hal_element_type_t).
uint32_t tio_value_element_type(const tio_value* value);
size_t tio_value_rank(const tio_value* value);
uint64_t tio_value_dim(const tio_value* value, size_t axis);
uint64_t tio_value_byte_length(const tio_value* value);
// Copies the value's bytes to dst (byte_length must equal tio_value_byte_length).
int32_t tio_value_read(tio_session* session, const tio_value* value, void* dst, size_t byte_length,
                       char** out_message);

// Calls an exported function. outputs has room for output_capacity values; *out_count says how many it returned.
int32_t tio_call(tio_session* session, const char* function, size_t input_count, tio_value* const* inputs,
                 size_t output_capacity, tio_value** outputs, size_t* out_count, char** out_message);

// Waiting on IREE's workers. IREE 3.13's blocking wait (iree_async_semaphore_multi_wait, under a call's fence and a
// device transfer) ends by spinning, with `pause`, until the worker thread that woke it has finished its callback.
// Woken on that worker's CPU, the waiting thread preempts it (the kernel's wakeup preemption) and spins until the
// worker runs again: on a machine with no spare core, until the spinner's time slice ends or a thread migrates.
// tio_wait_begin switches the calling thread from SCHED_OTHER to SCHED_BATCH, whose wakeups do not preempt a normal
// or batch task, and returns 1 if it did (0 if the thread had another policy, the switch was refused, or this is not
// Linux); tio_wait_end(that) switches it back to SCHED_OTHER if it is still SCHED_BATCH.
int32_t tio_wait_begin(void);
void tio_wait_end(int32_t switched);

#ifdef __cplusplus
}
#endif

#endif  // TAPEOUT_IREE_H_
