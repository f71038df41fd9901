// Modern Gradle (8/9) reads this file. Debian's Gradle 4.4.1 cannot evaluate any *.gradle.kts, so it is
// run with the Groovy twin instead: `gradle -c settings-gradle4.gradle …` (scripts/test does this).
// SettingsTest (jvm/src/test) checks that both declare the same projects.
rootProject.name = "tapeout"
include("jvm", "jvm-iree", "jvm-transformers", "examples:tiny-llm", "examples:gemma-scale", "examples:checkpoint-mlp", "examples:hf-llama", "jvm-generate")
