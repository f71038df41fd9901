package dev.tapeout.iree

import java.io.File

/** Anything that goes wrong serving a module; the subclasses carry what it is about. The JVM keeps running. */
open class IreeException(message: String) : RuntimeException(message)

/** IREE refused an operation; [code] is IREE's status name (`INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`, ...). */
class IreeRuntimeException(message: String, val code: String) : IreeException(message)

/**
 * A driver this runtime has could not make a device here ([driver] `vulkan` for [uri] `vulkan`):
 * its system library (the Vulkan loader, `libvulkan.so.1`) or a device it drives is missing. The message names
 * what to install (for Vulkan: a loader and a driver, e.g. Debian's `libvulkan1` and `mesa-vulkan-drivers`) or says
 * to serve on `local-task`; [code] is IREE's status name (`NOT_FOUND`, `UNAVAILABLE`, ...).
 */
class IreeDeviceUnavailableException(message: String, val driver: String, val uri: String, val code: String) : IreeException(message)

/** The bytes given as a compiled module are not an IREE module (.vmfb). */
class IreeNotAModuleException(message: String) : IreeException(message)

/** The module was compiled for another device than [device] (e.g. for Vulkan, loaded on local-task). */
class IreeWrongTargetException(message: String, val device: String) : IreeException(message)

/** The module needs parameter [key] (`<scope>::*` when no file was given under its scope) that no file holds. */
class IreeMissingParameterException(message: String, val key: String) : IreeException(message)

/** A parameter file that cannot be opened, mapped or indexed (truncated, not an archive, absent). */
class IreeParameterFileException(message: String, val file: File) : IreeException(message)

/** The module has no function [name]; it has [available]. */
class IreeNoSuchFunctionException(message: String, val name: String, val available: List<String>) : IreeException(message)

/** A call to [function] with [given] arguments; it takes [expected]. */
class IreeArityException(message: String, val function: String, val expected: Int, val given: Int) : IreeException(message)

/** [function]'s argument [index] ([argument]) is not what the function takes: it takes [expected], given [given]. */
open class IreeArgumentException(
    message: String,
    val function: String,
    val index: Int,
    val argument: String,
    val expected: String,
    val given: String,
) : IreeException(message)

/** An argument of the wrong element type ([expected] and [given] are `f32`, `i64`, ...). */
class IreeDTypeException(message: String, function: String, index: Int, argument: String, expected: String, given: String) :
    IreeArgumentException(message, function, index, argument, expected, given)

/** An argument of the wrong shape ([expected] with `?` where dynamic, e.g. `[?, 6]`; [given] e.g. `[2, 4]`). */
class IreeShapeException(message: String, function: String, index: Int, argument: String, expected: String, given: String) :
    IreeArgumentException(message, function, index, argument, expected, given)

/** Host data of [given] bytes for a value of [expected] bytes. */
class IreeSizeException(message: String, val expected: Long, val given: Long) : IreeException(message)

/** A file that could not be read. */
class IreeIoException(message: String, val file: File) : IreeException(message)
