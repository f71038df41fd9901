package dev.tapeout.gradle;

import org.gradle.api.Action;
import org.gradle.api.NamedDomainObjectContainer;
import org.gradle.api.Project;
import org.gradle.api.file.ProjectLayout;
import org.gradle.api.model.ObjectFactory;

/**
 * The {@code tapeout { }} block:
 * <pre>
 * tapeout {
 *     model = 'com.example.MyModel'     // implements dev.tapeout.ModelProvider
 *     moduleName = 'my_model'           // default: the project name
 *     outputDir = file('build/tapeout') // default
 *     scope = 'model'                   // default
 *     inlineBelowBytes = 4096           // default: smaller constants are inline, the rest external
 *     packedConstants = 'FAIL'          // or 'DEQUANTIZE', or 'KEEP' (planes of codes and scales), or
 *                                       // 'KEEP_ROW_BANDS' (Q8_0 / Q4_0 codes in row bands, a CPU form: decode
 *                                       // faster on some CPUs, slower on others)
 *     halfConstants = 'KEEP'            // or 'WIDEN': f16/bf16 weights as stored, or widened to f32
 *     maxArchiveBytes = 0               // > 0: split the archive into files of at most this size (a set + index)
 *     maxHeapSize = '2g'                // heap of the export JVM
 *     jvmArgs '-XX:+UseSerialGC'        // more arguments of the export JVM
 *     systemProperty 'ckpt', file('w.safetensors').path  // -D for the export JVM (System.getProperty in the model)
 *     args 'small'                      // ModelProvider.buildTape(args)
 *     inputFiles.from('weights')        // files the model reads: changing one reruns exportIrpa
 *     ireeTargets = ['llvm-cpu']        // compileIree: default; or vmvx, vulkan, cuda, hip. exportIrpa writes the
 *                                       // CPU's forms for llvm-cpu alone, the portable lowering otherwise
 *     tuning = true                     // default; false: the portable lowering whatever the target, no spec
 *     ireeCpu = 'host'                  // compileIree: --iree-llvmcpu-target-cpu (default host; generic runs anywhere)
 *     ireeCpuFeatures = '+avx2,+fma'    // compileIree: --iree-llvmcpu-target-cpu-features (default: the CPU's own)
 *     ireeFlags = ['--iree-llvmcpu-enable-ukernels=all']  // compileIree: more iree-compile flags
 *     ireeCompiler = '/opt/iree/bin/iree-compile'  // default: $TAPEOUT_IREE_COMPILE, .venv/bin, PATH
 *     models {                          // more models: one task exportIrpa<Name> each, all run by exportIrpa
 *         tiny { model = 'com.example.Tiny' }   // unset settings are the block's; output build/tapeout-tiny
 *     }
 * }
 * </pre>
 */
public class TapeoutExtension extends ModelSpec {
    private final NamedDomainObjectContainer<ModelSpec> models;

    /** The block of {@code project}, its named models made with the same services. */
    public TapeoutExtension(Project project) {
        super(project.getObjects(), project.getLayout(), project.files(), project.getName(), "", null);
        ObjectFactory objects = project.getObjects();
        ProjectLayout layout = project.getLayout();
        models = project.container(ModelSpec.class,
            name -> new ModelSpec(objects, layout, project.files(), project.getName(), name, this));
    }

    /** The named models of {@code models { }}. */
    public NamedDomainObjectContainer<ModelSpec> getModels() { return models; }

    /** Configures the named models: {@code models { tiny { model = '…' } }}. */
    public void models(Action<? super NamedDomainObjectContainer<ModelSpec>> configure) { configure.execute(models); }
}
