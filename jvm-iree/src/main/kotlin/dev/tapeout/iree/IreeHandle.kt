package dev.tapeout.iree

import java.lang.ref.PhantomReference
import java.lang.ref.ReferenceQueue
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong
import java.util.concurrent.locks.ReentrantReadWriteLock
import java.util.logging.Logger

/**
 * Something native that [close] frees once; using it afterwards is an [IllegalStateException] naming it. Every
 * native use holds a read lock and [close] the write lock, so a close from another thread waits for calls in flight
 * instead of freeing what they use. One never closed is freed once the garbage collector finds it unreachable (and
 * that is logged once per process): close what you make, with `use { }`, to free device memory when you choose.
 */
abstract class IreeHandle internal constructor(handle: Long, what: String, release: (Long) -> Unit) : AutoCloseable {
    // The native handle lives in a state object the cleaner holds, never in a reference to this object: a cleanup
    // that reached `this` would keep it reachable forever.
    private val state = IreeCleaner.State(handle, what, release)
    internal val lock = ReentrantReadWriteLock()

    init {
        IreeCleaner.register(this, state)
    }

    /** Runs `block` with the live native handle, the read lock held; a native failure becomes its typed exception. */
    internal inline fun <T> held(block: (Long) -> T): T {
        lock.readLock().lock()
        try {
            return native { block(liveLocked()) }
        } finally {
            lock.readLock().unlock()
        }
    }

    /** The handle, under a lock the caller holds. */
    internal fun liveLocked(): Long {
        val h = state.handle
        check(h != 0L) { "${state.what} is closed" }
        return h
    }

    /** Whether [close] was called. */
    val isClosed: Boolean get() = lock.readLock().run { lock(); try { state.handle == 0L } finally { unlock() } }

    /** Frees the native object (a second call does nothing). */
    override fun close() {
        lock.writeLock().lock()
        try {
            state.close()
        } finally {
            lock.writeLock().unlock()
        }
    }
}

/**
 * Frees the native objects of handles nobody closed, from a daemon thread, once the garbage collector finds the
 * handle unreachable. The garbage collector does not see native memory, so, as the JDK does for direct buffers, a
 * registration that finds [GC_AFTER] handles waiting asks for a collection: forgotten results of a loop of calls
 * stay bounded instead of growing until the heap happens to fill.
 */
internal object IreeCleaner {
    /** The native handle of an [IreeHandle], shared with the cleaner. */
    internal class State(@Volatile var handle: Long, val what: String, private val release: (Long) -> Unit) {
        /** Frees the handle once; `true` if this call did. */
        @Synchronized
        fun close(): Boolean {
            val h = handle
            handle = 0L
            if (h == 0L) return false
            open.decrementAndGet()
            release(h)
            return true
        }
    }

    private class Ref(owner: Any, val state: State) : PhantomReference<Any>(owner, queue)

    private val queue = ReferenceQueue<Any>()
    private val registered: MutableSet<Ref> = ConcurrentHashMap.newKeySet()
    private val log = Logger.getLogger("dev.tapeout.iree")

    /** Handles freed by the cleaner, not by [IreeHandle.close], since the process started. */
    val forgotten = AtomicLong()

    /** Handles made and not yet freed. */
    private val open = AtomicLong()

    /** Open handles past which a registration asks for a collection, and again every as many more. */
    const val GC_AFTER = 1024L

    @Volatile
    private var nextGc = GC_AFTER

    @Volatile
    private var thread: Thread? = null

    fun register(owner: Any, state: State) {
        registered += Ref(owner, state)
        val n = open.incrementAndGet()
        if (thread == null) start()
        if (n >= nextGc) {
            nextGc = n + GC_AFTER
            System.gc()
            drain()
        } else if (n < nextGc - 2 * GC_AFTER) {
            nextGc = maxOf(GC_AFTER, n + GC_AFTER)
        }
    }

    @Synchronized
    private fun start() {
        if (thread != null) return
        thread = Thread({
            while (true) {
                try {
                    clean(queue.remove() as Ref)
                } catch (_: InterruptedException) {
                    // A daemon: interrupted only at shutdown, where there is nothing left to free.
                    return@Thread
                } catch (t: Throwable) {
                    log.warning("tapeout-iree cleaner: freeing a forgotten handle failed: $t")
                }
            }
        }, "tapeout-iree-cleaner").apply {
            isDaemon = true
            start()
        }
    }

    /** Frees whatever is already queued, on the calling thread. */
    private fun drain() {
        while (true) clean(queue.poll() as Ref? ?: return)
    }

    private fun clean(ref: Ref) {
        registered.remove(ref)
        if (ref.state.close() && forgotten.getAndIncrement() == 0L) {
            log.warning(
                "tapeout-iree: a ${ref.state.what} was never closed and is freed by the garbage collector; close " +
                    "values, results (IreeResults) and modules with close() or use { } to free device memory when " +
                    "you choose (logged once)",
            )
        }
    }

    /** Handles made and not yet freed (for the tests). */
    val openHandles: Long get() = open.get()
}
