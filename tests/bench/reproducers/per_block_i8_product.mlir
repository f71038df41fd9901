func.func @main(%a: tensor<128x1x32xi8>, %b: tensor<128x32x4096xi8>) -> tensor<128x1x4096xi32> {
  %r = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<128x1x32xi8>, tensor<128x32x4096xi8>) -> tensor<128x1x4096xi32>
  return %r : tensor<128x1x4096xi32>
}
