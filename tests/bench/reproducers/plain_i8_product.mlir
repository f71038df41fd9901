func.func @main(%a: tensor<1x4096xi8>, %b: tensor<4096x4096xi8>) -> tensor<1x4096xi32> {
  %r = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<1x4096xi8>, tensor<4096x4096xi8>) -> tensor<1x4096xi32>
  return %r : tensor<1x4096xi32>
}
