// tapeout's shim over IREE's runtime: instance, device, session with memory-mapped parameter files, values and
// calls. See tapeout_iree.h for the contract; everything IREE returns as a status comes back as code + message.

// For SCHED_BATCH (tio_wait_begin).
#define _GNU_SOURCE
#include "tapeout_iree.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "iree/async/frontier_tracker.h"
#include "iree/base/api.h"
#include "iree/base/tooling/flags.h"
#include "iree/hal/api.h"
#include "iree/io/file_handle.h"
#include "iree/io/formats/parser_registry.h"
#include "iree/io/parameter_index.h"
#include "iree/io/parameter_index_provider.h"
#include "iree/modules/hal/module.h"
#include "iree/modules/io/parameters/module.h"
#include "iree/runtime/api.h"
#include "iree/vm/bytecode/module.h"

struct tio_instance {
  iree_runtime_instance_t* runtime;
};

struct tio_device {
  iree_hal_device_t* hal;
  // The device's group, made once with the device: every session's HAL module shares it. Making a group assigns
  // the device's queues their place in the group's frontier tracker, and IREE 3.13's Vulkan driver refuses a second
  // assignment for the device's life ("Vulkan queue frontier already assigned"), so a group per session (what
  // iree_runtime_session_create_with_device makes) would serve one module per Vulkan device, ever. One group per
  // device serves any number of modules, at once or in turn, on every driver.
  iree_hal_device_group_t* group;
};

// A VM context of its own (IREE's HAL module over the device's group, the io_parameters module, the user's module)
// rather than an iree_runtime_session_t, which makes its own device group: see tio_device.
struct tio_session {
  iree_vm_context_t* context;
  iree_vm_module_t* module;  // the user's bytecode module (retained)
  iree_hal_device_t* device;  // retained
};

static char* tio_strdup_n(const char* data, size_t length) {
  char* copy = (char*)malloc(length + 1);
  if (!copy) return NULL;
  memcpy(copy, data, length);
  copy[length] = 0;
  return copy;
}

// Consumes |status|; returns its code and (if not OK) sets *out_message to its text.
static int32_t tio_consume(iree_status_t status, char** out_message) {
  if (out_message) *out_message = NULL;
  if (iree_status_is_ok(status)) return 0;
  int32_t code = (int32_t)iree_status_code(status);
  char* text = NULL;
  iree_host_size_t length = 0;
  iree_allocator_t allocator = iree_allocator_system();
  if (iree_status_to_string(status, &allocator, &text, &length)) {
    if (out_message) *out_message = tio_strdup_n(text, length);
    iree_allocator_free(allocator, text);
  } else if (out_message) {
    *out_message = tio_strdup_n("(IREE status without text)", 26);
  }
  iree_status_free(status);
  return code == 0 ? (int32_t)IREE_STATUS_UNKNOWN : code;
}

void tio_free_message(char* message) { free(message); }

int32_t tio_instance_create(tio_instance** out_instance, char** out_message) {
  *out_instance = NULL;
  iree_runtime_instance_options_t options;
  iree_runtime_instance_options_initialize(&options);
  iree_runtime_instance_options_use_all_available_drivers(&options);
  tio_instance* instance = (tio_instance*)calloc(1, sizeof(*instance));
  if (!instance) return tio_consume(iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED, "out of memory"), out_message);
  iree_status_t status = iree_runtime_instance_create(&options, iree_allocator_system(), &instance->runtime);
  if (!iree_status_is_ok(status)) {
    free(instance);
    return tio_consume(status, out_message);
  }
  *out_instance = instance;
  return 0;
}

void tio_instance_release(tio_instance* instance) {
  if (!instance) return;
  iree_runtime_instance_release(instance->runtime);
  free(instance);
}

int32_t tio_instance_drivers(tio_instance* instance, char** out_names, char** out_message) {
  *out_names = NULL;
  iree_host_size_t count = 0;
  iree_hal_driver_info_t* infos = NULL;
  iree_allocator_t allocator = iree_allocator_system();
  iree_status_t status = iree_hal_driver_registry_enumerate(iree_runtime_instance_driver_registry(instance->runtime),
                                                            allocator, &count, &infos);
  if (!iree_status_is_ok(status)) return tio_consume(status, out_message);
  size_t total = 1;
  for (iree_host_size_t i = 0; i < count; ++i) total += infos[i].driver_name.size + 1;
  char* names = (char*)malloc(total);
  if (!names) {
    iree_allocator_free(allocator, infos);
    return tio_consume(iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED, "out of memory"), out_message);
  }
  size_t at = 0;
  for (iree_host_size_t i = 0; i < count; ++i) {
    memcpy(names + at, infos[i].driver_name.data, infos[i].driver_name.size);
    at += infos[i].driver_name.size;
    names[at++] = '\n';
  }
  names[at] = 0;
  iree_allocator_free(allocator, infos);
  *out_names = names;
  return 0;
}

// local-task reads its worker count from IREE's process-wide flags when its driver is created.
static iree_status_t tio_set_worker_flag(int32_t workers) {
  char flag[64];
  snprintf(flag, sizeof(flag), "--task_topology_max_group_count=%d", workers > 0 ? workers : 64);
  char program[] = "tapeout";
  char* argv_storage[] = {program, flag, NULL};
  char** argv = argv_storage;
  int argc = 2;
  return iree_flags_parse(IREE_FLAGS_PARSE_MODE_DEFAULT, &argc, &argv);
}

int32_t tio_device_create(tio_instance* instance, const char* uri, int32_t workers, tio_device** out_device,
                          char** out_message) {
  *out_device = NULL;
  iree_status_t status = tio_set_worker_flag(workers);
  tio_device* device = NULL;
  if (iree_status_is_ok(status)) {
    device = (tio_device*)calloc(1, sizeof(*device));
    if (!device) status = iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (iree_status_is_ok(status)) {
    status = iree_runtime_instance_try_create_default_device(instance->runtime, iree_make_cstring_view(uri),
                                                             &device->hal);
  }
  iree_async_frontier_tracker_t* tracker = NULL;
  if (iree_status_is_ok(status)) {
    status = iree_async_frontier_tracker_create(iree_async_frontier_tracker_options_default(),
                                                iree_allocator_system(), &tracker);
  }
  if (iree_status_is_ok(status)) {
    status = iree_hal_device_group_create_from_device(device->hal, tracker, iree_allocator_system(), &device->group);
  }
  iree_async_frontier_tracker_release(tracker);  // the group and the device retain it
  if (!iree_status_is_ok(status)) {
    tio_device_release(device);
    return tio_consume(status, out_message);
  }
  *out_device = device;
  return 0;
}

void tio_device_release(tio_device* device) {
  if (!device) return;
  iree_hal_device_group_release(device->group);
  iree_hal_device_release(device->hal);
  free(device);
}

static void tio_release_mapping(void* user_data, iree_io_file_handle_primitive_t primitive) {
  (void)primitive;
  iree_io_file_mapping_release((iree_io_file_mapping_t*)user_data);
}

// Maps |path| read-only and returns a host-allocation file handle over the mapping, so that IREE's parameter
// provider imports entries as buffers over the file's own pages instead of reading them into new memory.
static iree_status_t tio_open_mapped(const char* path, iree_allocator_t allocator, iree_io_file_handle_t** out) {
  *out = NULL;
  iree_io_file_handle_t* file = NULL;
  IREE_RETURN_IF_ERROR(iree_io_file_handle_open(IREE_IO_FILE_MODE_READ | IREE_IO_FILE_MODE_SHARE_READ,
                                                iree_make_cstring_view(path), allocator, &file),
                       "opening parameter file '%s'", path);
  iree_io_file_mapping_t* mapping = NULL;
  iree_status_t status = iree_io_file_map_view(file, IREE_IO_FILE_ACCESS_READ, 0, IREE_HOST_SIZE_MAX,
                                               IREE_IO_FILE_MAPPING_FLAG_EXCLUDE_FROM_DUMPS, allocator, &mapping);
  iree_io_file_handle_release(file);  // the mapping retains it
  if (!iree_status_is_ok(status)) return iree_status_annotate_f(status, "mapping parameter file '%s'", path);
  iree_const_byte_span_t contents = iree_io_file_mapping_contents_ro(mapping);
  iree_io_file_handle_release_callback_t release = {.fn = tio_release_mapping, .user_data = mapping};
  status = iree_io_file_handle_wrap_host_allocation(
      IREE_IO_FILE_ACCESS_READ, iree_make_byte_span((void*)contents.data, contents.data_length), release, allocator,
      out);
  if (!iree_status_is_ok(status)) iree_io_file_mapping_release(mapping);
  return status;
}

// Indexes every file into one index per scope and makes the io_parameters module serving them.
static iree_status_t tio_parameters_module(iree_vm_instance_t* vm, size_t file_count, const char* const* scopes,
                                           const char* const* paths, iree_allocator_t allocator,
                                           iree_vm_module_t** out_module, size_t* out_file) {
  *out_module = NULL;
  iree_io_parameter_provider_t** providers =
      (iree_io_parameter_provider_t**)calloc(file_count ? file_count : 1, sizeof(*providers));
  if (!providers) return iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  size_t provider_count = 0;
  iree_status_t status = iree_ok_status();
  // One provider per distinct scope, in order of first appearance.
  for (size_t i = 0; i < file_count && iree_status_is_ok(status); ++i) {
    int seen = 0;
    for (size_t j = 0; j < i; ++j) seen |= strcmp(scopes[i], scopes[j]) == 0;
    if (seen) continue;
    iree_io_parameter_index_t* index = NULL;
    status = iree_io_parameter_index_create(allocator, &index);
    for (size_t k = i; k < file_count && iree_status_is_ok(status); ++k) {
      if (strcmp(scopes[i], scopes[k]) != 0) continue;
      iree_io_file_handle_t* file = NULL;
      *out_file = k;
      status = tio_open_mapped(paths[k], allocator, &file);
      if (iree_status_is_ok(status)) {
        // The format is told by the name's extension; tapeout's archives are .irpa whatever they are called.
        const char* dot = strrchr(paths[k], '.');
        int known = dot && (strcmp(dot, ".irpa") == 0 || strcmp(dot, ".gguf") == 0 || strcmp(dot, ".safetensors") == 0);
        status = iree_io_parse_file_index(known ? iree_make_cstring_view(paths[k]) : iree_make_cstring_view("irpa"),
                                          file, index, allocator);
        if (!iree_status_is_ok(status)) status = iree_status_annotate_f(status, "indexing '%s'", paths[k]);
        iree_io_file_handle_release(file);
      }
    }
    if (iree_status_is_ok(status)) {
      status = iree_io_parameter_index_provider_create(
          iree_make_cstring_view(scopes[i]), index, IREE_IO_PARAMETER_INDEX_PROVIDER_DEFAULT_MAX_CONCURRENT_OPERATIONS,
          allocator, &providers[provider_count]);
      if (iree_status_is_ok(status)) ++provider_count;
    }
    iree_io_parameter_index_release(index);
  }
  if (iree_status_is_ok(status)) {
    status = iree_io_parameters_module_create(vm, provider_count, providers, allocator, out_module);
  }
  for (size_t i = 0; i < provider_count; ++i) iree_io_parameter_provider_release(providers[i]);
  free(providers);
  return status;
}

int32_t tio_session_create(tio_instance* instance, tio_device* device, const uint8_t* vmfb, size_t vmfb_length,
                           size_t file_count, const char* const* scopes, const char* const* paths,
                           tio_session** out_session, int32_t* out_phase, size_t* out_file, char** out_message) {
  *out_session = NULL;
  *out_phase = TIO_PHASE_MODULE;
  *out_file = 0;
  iree_allocator_t allocator = iree_allocator_system();
  iree_vm_instance_t* vm = iree_runtime_instance_vm_instance(instance->runtime);
  tio_session* session = (tio_session*)calloc(1, sizeof(*session));
  if (!session) return tio_consume(iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED, "out of memory"), out_message);

  // The bytecode module keeps its flatbuffer: copy it into memory the module frees.
  uint8_t* copy = NULL;
  iree_status_t status = iree_allocator_malloc(allocator, vmfb_length ? vmfb_length : 1, (void**)&copy);
  if (iree_status_is_ok(status)) {
    if (vmfb_length) memcpy(copy, vmfb, vmfb_length);
    status = iree_vm_bytecode_module_create(vm, IREE_VM_BYTECODE_MODULE_FLAG_NONE,
                                            iree_make_const_byte_span(copy, vmfb_length),
                                            allocator, allocator,
                                            &session->module);
    // The module owns the copy only once it exists: a refused module leaves it to us.
    if (!iree_status_is_ok(status)) iree_allocator_free(allocator, copy);
  }
  if (iree_status_is_ok(status)) {
    *out_phase = TIO_PHASE_CONTEXT;
    status = iree_vm_context_create(vm, IREE_VM_CONTEXT_FLAG_NONE, allocator, &session->context);
  }
  // The HAL module, as iree_runtime_session_create_with_device makes it, over the device's own group.
  if (iree_status_is_ok(status)) {
    iree_vm_module_t* hal = NULL;
    status = iree_hal_module_create(vm, iree_hal_module_device_policy_default(), device->group,
                                    IREE_HAL_MODULE_FLAG_NONE, iree_hal_module_debug_sink_stdio(stderr), allocator,
                                    &hal);
    if (iree_status_is_ok(status)) status = iree_vm_context_register_modules(session->context, 1, &hal);
    iree_vm_module_release(hal);
  }
  // Always, even with no files: a module that needs parameters then fails naming the scope it wanted.
  if (iree_status_is_ok(status)) {
    *out_phase = TIO_PHASE_PARAMETERS;
    iree_vm_module_t* parameters = NULL;
    status = tio_parameters_module(vm, file_count, scopes, paths, allocator, &parameters, out_file);
    if (iree_status_is_ok(status)) status = iree_vm_context_register_modules(session->context, 1, &parameters);
    iree_vm_module_release(parameters);
  }
  if (iree_status_is_ok(status)) {
    *out_phase = TIO_PHASE_INITIALIZE;
    // Registering runs the module's initializers: parameters are resolved and loaded here.
    status = iree_vm_context_register_modules(session->context, 1, &session->module);
  }
  if (!iree_status_is_ok(status)) {
    tio_session_release(session);
    return tio_consume(status, out_message);
  }
  session->device = device->hal;
  iree_hal_device_retain(session->device);
  *out_phase = TIO_PHASE_NONE;
  *out_session = session;
  return 0;
}

void tio_session_release(tio_session* session) {
  if (!session) return;
  if (session->context) iree_vm_context_release(session->context);
  if (session->module) iree_vm_module_release(session->module);
  if (session->device) iree_hal_device_release(session->device);
  free(session);
}

int32_t tio_session_functions(tio_session* session, char** out_listing, char** out_message) {
  *out_listing = NULL;
  iree_vm_module_signature_t signature = iree_vm_module_signature(session->module);
  iree_string_builder_t builder;
  iree_string_builder_initialize(iree_allocator_system(), &builder);
  iree_status_t status = iree_ok_status();
  for (iree_host_size_t i = 0; i < signature.export_function_count && iree_status_is_ok(status); ++i) {
    iree_vm_function_t function;
    status = iree_vm_module_lookup_function_by_ordinal(session->module, IREE_VM_FUNCTION_LINKAGE_EXPORT, i,
                                                       &function);
    if (!iree_status_is_ok(status)) break;
    iree_string_view_t name = iree_vm_function_name(&function);
    if (iree_string_view_starts_with(name, IREE_SV("__"))) continue;  // initializers and other internals
    iree_string_view_t declaration = iree_vm_function_lookup_attr_by_name(&function, IREE_SV("iree.abi.declaration"));
    status = iree_string_builder_append_format(&builder, "%.*s\t%.*s\n", (int)name.size, name.data,
                                               (int)declaration.size, declaration.data);
  }
  if (iree_status_is_ok(status)) {
    *out_listing = tio_strdup_n(iree_string_builder_buffer(&builder), iree_string_builder_size(&builder));
    if (!*out_listing) status = iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  }
  iree_string_builder_deinitialize(&builder);
  return tio_consume(status, out_message);
}

uint32_t tio_value_element_type(const tio_value* value) {
  return (uint32_t)iree_hal_buffer_view_element_type((const iree_hal_buffer_view_t*)value);
}

int32_t tio_value_create(tio_session* session, uint32_t element_type, size_t rank, const int64_t* dims,
                         const void* data, size_t byte_length, tio_value** out_value, char** out_message) {
  *out_value = NULL;
  iree_hal_element_type_t type = (iree_hal_element_type_t)element_type;
  if (type == IREE_HAL_ELEMENT_TYPE_NONE) {
    return tio_consume(iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "no element type"), out_message);
  }
  iree_hal_dim_t shape[16];
  if (rank > IREE_ARRAYSIZE(shape)) {
    return tio_consume(iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "rank %zu is more than 16", rank), out_message);
  }
  for (size_t i = 0; i < rank; ++i) shape[i] = (iree_hal_dim_t)dims[i];
  iree_hal_buffer_params_t params = {
      .type = IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL,
      .usage = IREE_HAL_BUFFER_USAGE_DEFAULT,
  };
  iree_hal_buffer_view_t* view = NULL;
  iree_status_t status = iree_hal_buffer_view_allocate_buffer_copy(
      session->device, iree_hal_device_allocator(session->device), rank, shape, type,
      IREE_HAL_ENCODING_TYPE_DENSE_ROW_MAJOR, params, iree_make_const_byte_span(data, byte_length), &view);
  if (!iree_status_is_ok(status)) return tio_consume(status, out_message);
  *out_value = (tio_value*)view;
  return 0;
}

void tio_value_release(tio_value* value) { iree_hal_buffer_view_release((iree_hal_buffer_view_t*)value); }

size_t tio_value_rank(const tio_value* value) {
  return iree_hal_buffer_view_shape_rank((const iree_hal_buffer_view_t*)value);
}

uint64_t tio_value_dim(const tio_value* value, size_t axis) {
  return (uint64_t)iree_hal_buffer_view_shape_dim((const iree_hal_buffer_view_t*)value, axis);
}

uint64_t tio_value_byte_length(const tio_value* value) {
  return (uint64_t)iree_hal_buffer_view_byte_length((const iree_hal_buffer_view_t*)value);
}

int32_t tio_value_read(tio_session* session, const tio_value* value, void* dst, size_t byte_length,
                       char** out_message) {
  const iree_hal_buffer_view_t* view = (const iree_hal_buffer_view_t*)value;
  if ((uint64_t)byte_length != (uint64_t)iree_hal_buffer_view_byte_length(view)) {
    return tio_consume(iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "reading %zu bytes of a %" PRIu64 "-byte value",
                                        byte_length, (uint64_t)iree_hal_buffer_view_byte_length(view)),
                       out_message);
  }
  if (byte_length == 0) return 0;
  return tio_consume(iree_hal_device_transfer_d2h(session->device, iree_hal_buffer_view_buffer(view), 0, dst,
                                                  byte_length, IREE_HAL_TRANSFER_BUFFER_FLAG_DEFAULT,
                                                  iree_infinite_timeout()),
                     out_message);
}

int32_t tio_call(tio_session* session, const char* function, size_t input_count, tio_value* const* inputs,
                 size_t output_capacity, tio_value** outputs, size_t* out_count, char** out_message) {
  *out_count = 0;
  iree_allocator_t allocator = iree_allocator_system();
  iree_vm_function_t vm_function;
  iree_status_t status = iree_vm_module_lookup_function_by_name(session->module, IREE_VM_FUNCTION_LINKAGE_EXPORT,
                                                                iree_make_cstring_view(function), &vm_function);
  iree_vm_list_t* args = NULL;
  iree_vm_list_t* results = NULL;
  if (iree_status_is_ok(status)) {
    status = iree_vm_list_create(iree_vm_make_undefined_type_def(), input_count, allocator, &args);
  }
  if (iree_status_is_ok(status)) {
    status = iree_vm_list_create(iree_vm_make_undefined_type_def(), output_capacity, allocator, &results);
  }
  for (size_t i = 0; i < input_count && iree_status_is_ok(status); ++i) {
    iree_vm_ref_t ref = {0};
    status = iree_vm_ref_wrap_assign((iree_hal_buffer_view_t*)inputs[i], iree_hal_buffer_view_type(), &ref);
    if (iree_status_is_ok(status)) status = iree_vm_list_push_ref_retain(args, &ref);
  }
  if (iree_status_is_ok(status)) {
    status = iree_vm_invoke(session->context, vm_function, IREE_VM_INVOCATION_FLAG_NONE, /*policy=*/NULL, args,
                            results, allocator);
  }
  if (iree_status_is_ok(status)) {
    iree_host_size_t count = iree_vm_list_size(results);
    if (count > output_capacity) {
      status = iree_make_status(IREE_STATUS_OUT_OF_RANGE, "function returned %zu values, room for %zu", count,
                                output_capacity);
    }
    for (iree_host_size_t i = 0; i < count && iree_status_is_ok(status); ++i) {
      // The list's reference moves to the caller's value.
      iree_vm_ref_t ref = {0};
      iree_hal_buffer_view_t* view = NULL;
      status = iree_vm_list_pop_front_ref_move(results, &ref);
      if (iree_status_is_ok(status)) status = iree_hal_buffer_view_check_deref(ref, &view);
      if (iree_status_is_ok(status)) {
        outputs[(*out_count)++] = (tio_value*)view;
      } else {
        iree_vm_ref_release(&ref);
      }
    }
    if (!iree_status_is_ok(status)) {
      for (size_t i = 0; i < *out_count; ++i) tio_value_release(outputs[i]);
      *out_count = 0;
    }
  }
  iree_vm_list_release(args);
  iree_vm_list_release(results);
  return tio_consume(status, out_message);
}

// See tapeout_iree.h. Only a SCHED_OTHER thread is switched (a real-time, idle or batch thread is the caller's choice),
// and a refusal (a seccomp filter, say) leaves the wait as IREE's own: slower, never wrong. Raw system calls on thread
// 0 (the caller): per thread on every C library (musl's sched_* wrappers return ENOSYS), and never glibc's cached
// copy of a policy, which pthread_getschedparam returns even after the policy was changed by other means. About
// a microsecond each, four a wait.
#if defined(__linux__) && defined(SCHED_BATCH)
static long tio_policy(void) { return syscall(SYS_sched_getscheduler, 0); }

static long tio_set_policy(int policy) {
  struct sched_param param = {0};
  return syscall(SYS_sched_setscheduler, 0, policy, &param);
}
#endif

int32_t tio_wait_begin(void) {
#if defined(__linux__) && defined(SCHED_BATCH)
  return tio_policy() == SCHED_OTHER && tio_set_policy(SCHED_BATCH) == 0;
#else
  return 0;
#endif
}

void tio_wait_end(int32_t switched) {
#if defined(__linux__) && defined(SCHED_BATCH)
  // Back to SCHED_OTHER only from the policy tio_wait_begin set: a change made during the wait stays.
  if (switched && tio_policy() == SCHED_BATCH) (void)tio_set_policy(SCHED_OTHER);
#else
  (void)switched;
#endif
}
